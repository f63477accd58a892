#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "tokenizer/unicode_props.h"

namespace fathom::tok {

RegexScratch::RegexScratch() {
  match_data_ = pcre2_match_data_create(1, nullptr);
  match_context_ = pcre2_match_context_create(nullptr);
  jit_stack_ = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_jit_stack_assign(static_cast<pcre2_match_context*>(match_context_), nullptr, jit_stack_);
}

RegexScratch::~RegexScratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
  pcre2_match_context_free(static_cast<pcre2_match_context*>(match_context_));
  pcre2_jit_stack_free(static_cast<pcre2_jit_stack*>(jit_stack_));
}

namespace {

// The code points whose general category `name` covers ("L", "Lu", "Letter", "LC", ...)
// as PCRE2 class ranges ("\\x{41}-\\x{5A}..."), or "" if `name` is not a category (a
// script, say, which is left to PCRE2).
std::string category_class(std::string_view name) {
  static const std::pair<std::string_view, std::string_view> kLong[] = {
      {"Letter", "L"},      {"Mark", "M"},  {"Combining_Mark", "M"}, {"Number", "N"},
      {"Punctuation", "P"}, {"punct", "P"}, {"Symbol", "S"},         {"Separator", "Z"},
      {"Other", "C"},       {"L&", "LC"},   {"Cased_Letter", "LC"}};
  for (const auto& [l, s] : kLong)
    if (name == l) name = s;
  bool member[32] = {};
  bool any = false;
  for (int c = 0; c < 30; ++c) {
    std::string_view cat = general_category_name(c);
    bool in = name.size() == 1 ? cat[0] == name[0]
              : name == "LC"   ? (cat == "Lu" || cat == "Ll" || cat == "Lt")
                               : cat == name;
    member[c] = in;
    any |= in;
  }
  if (!any) return "";
  std::string out;
  char buf[40];
  for (const auto& [first, last] : category_ranges(member)) {
    if (first == last) {
      std::snprintf(buf, sizeof buf, "\\x{%X}", first);
    } else {
      std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", first, last);
    }
    out += buf;
  }
  return out;
}

const std::string& cached_category_class(std::string_view name) {
  static std::mutex mu;
  static std::map<std::string, std::string, std::less<>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(std::string(name), category_class(name)).first;
  return it->second;
}

}  // namespace

std::string Regex::translate_oniguruma(std::string_view p) {
  // Oniguruma's \s is Unicode White_Space. PCRE2's differs by version (U+0085 missing,
  // U+180E present in 10.42), so \s and \S are spelled out as that exact set.
  static constexpr std::string_view kSpaceSet =
      "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{"
      "202F}"
      "\\x{205F}\\x{3000}";
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char d = p[i + 1];
      if (d == 's') {
        if (in_class) {
          out += kSpaceSet;
        } else {
          out += "[";
          out += kSpaceSet;
          out += "]";
        }
      } else if (d == 'S' && !in_class) {
        out += "[^";
        out += kSpaceSet;
        out += "]";
      } else if ((d == 'p' || (d == 'P' && !in_class)) && i + 2 < p.size() && p[i + 2] == '{' &&
                 p.find('}', i + 3) != std::string_view::npos) {
        // General categories from Fathom's table (HF's Unicode version), not PCRE2's.
        size_t close = p.find('}', i + 3);
        std::string_view name = p.substr(i + 3, close - (i + 3));
        const std::string& ranges = cached_category_class(name);
        if (ranges.empty()) {
          out.append(p.substr(i, close + 1 - i));
        } else if (in_class) {
          out += ranges;
        } else {
          out += d == 'P' ? "[^" : "[";
          out += ranges;
          out += "]";
        }
        i = close;
        continue;
      } else {
        out += c;
        out += d;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Result<std::unique_ptr<Regex>> Regex::compile(std::string_view pattern) {
  std::unique_ptr<Regex> r(new Regex());
  r->pattern_ = std::string(pattern);
  std::string translated = translate_oniguruma(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    return invalid_argument("cannot compile regex '" + std::string(pattern) + "' at offset " +
                            std::to_string(offset) + ": " + reinterpret_cast<char*>(buf));
  }
  r->code_ = code;
  r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return r;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::find(std::string_view subject, size_t start, size_t* match_start, size_t* match_end,
                 RegexScratch& scratch) const {
  auto* md = static_cast<pcre2_match_data*>(scratch.match_data());
  auto* mc = static_cast<pcre2_match_context*>(scratch.match_context());
  auto* code = static_cast<pcre2_code*>(code_);
  int rc = jit_ ? pcre2_jit_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()),
                                  subject.size(), start, 0, md, mc)
                : pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(),
                              start, PCRE2_NO_UTF_CHECK, md, mc);
  if (rc < 0) return false;  // no match (or a resource limit: treated as no match)
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *match_start = ov[0];
  *match_end = ov[1];
  return true;
}

}  // namespace fathom::tok
