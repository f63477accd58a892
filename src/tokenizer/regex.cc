#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace fathom::tok {

RegexScratch::RegexScratch() {
  match_data_ = pcre2_match_data_create(1, nullptr);
  match_context_ = pcre2_match_context_create(nullptr);
  jit_stack_ = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_jit_stack_assign(static_cast<pcre2_match_context*>(match_context_), nullptr,
                         jit_stack_);
}

RegexScratch::~RegexScratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
  pcre2_match_context_free(static_cast<pcre2_match_context*>(match_context_));
  pcre2_jit_stack_free(static_cast<pcre2_jit_stack*>(jit_stack_));
}

std::string Regex::translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char d = p[i + 1];
      if (d == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (d == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
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
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK,
                                   &err, &offset, nullptr);
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
