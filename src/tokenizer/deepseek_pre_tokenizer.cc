// DeepSeekPreTokenizer: one linear scan that reproduces, piece for piece, HF's
//   Split(\p{N}{1,3}) -> Split([\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+) -> Split(main)
// with every split Isolated. Levels 1 and 2 cut the text into "subjects" (groups of up to
// three numeric characters, CJK/kana runs, and the rest); level 3 runs on each subject
// alone, so its lookahead and runs stop at the subject's end, as in HF. The level-3
// alternatives are tried in pattern order at each position, which is what a
// leftmost-first regex does; their greedy/backtracking outcomes are computed directly.

#include "core/utf8.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_props.h"

namespace fathom::tok {

const char* const DeepSeekPreTokenizer::kDigitsPattern = "\\p{N}{1,3}";
const char* const DeepSeekPreTokenizer::kCjkPattern =
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+";
const char* const DeepSeekPreTokenizer::kMainPattern =
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

namespace {

constexpr uint8_t kLM = kLetter | kMark;
constexpr uint8_t kPS = kPunct | kSymbol;

inline bool is_ascii_alpha(unsigned char c) {
  return static_cast<unsigned>((c | 0x20) - 'a') < 26u;
}
inline bool is_ascii_punct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

struct Scanner {
  const CharTable& table = char_table();
  uint8_t ascii[128];

  Scanner() {
    for (uint32_t c = 0; c < 128; ++c) ascii[c] = char_flags(table, c);
  }

  inline uint8_t flags_at(std::string_view s, size_t i, size_t* len, uint32_t* cp) const {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      *len = 1;
      *cp = b;
      return ascii[b];
    }
    *cp = utf8::decode_at(s, i, len);
    return char_flags(table, *cp);
  }
  inline uint8_t flags_at(std::string_view s, size_t i) const {
    size_t len;
    uint32_t cp;
    return flags_at(s, i, &len, &cp);
  }

  // End of the run of characters whose flags intersect `mask`, starting at i.
  inline size_t run_end(std::string_view s, size_t i, uint8_t mask) const {
    size_t len;
    uint32_t cp;
    while (i < s.size() && (flags_at(s, i, &len, &cp) & mask)) i += len;
    return i;
  }
  static inline size_t crlf_run_end(std::string_view s, size_t i) {
    while (i < s.size() && (s[i] == '\r' || s[i] == '\n')) ++i;
    return i;
  }

  // Length of the level-3 match at s[i], or 0 if no alternative matches there.
  size_t match_at(std::string_view s, size_t i, uint32_t cp, uint8_t f, size_t len) const {
    const size_t m = s.size();
    // [ASCII punctuation][A-Za-z]+
    if (cp < 128 && is_ascii_punct(cp) && i + 1 < m &&
        is_ascii_alpha(static_cast<unsigned char>(s[i + 1]))) {
      size_t j = i + 1;
      while (j < m && is_ascii_alpha(static_cast<unsigned char>(s[j]))) ++j;
      return j - i;
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    if (f & kLM) return run_end(s, i, kLM) - i;
    if (cp != '\r' && cp != '\n' && !(f & (kLetter | kPS)) && i + len < m &&
        (flags_at(s, i + len) & kLM)) {
      return run_end(s, i + len, kLM) - i;
    }
    // ' '?[\p{P}\p{S}]+[\r\n]*
    if (cp == ' ') {
      if (i + 1 < m && (flags_at(s, i + 1) & kPS))
        return crlf_run_end(s, run_end(s, i + 1, kPS)) - i;
    } else if (f & kPS) {
      return crlf_run_end(s, run_end(s, i, kPS)) - i;
    }
    // \s*[\r\n]+ | \s+(?!\S) | \s+
    if (f & kSpace) {
      size_t j = i, last_start = i, after_last_crlf = 0;
      size_t lj;
      uint32_t cj;
      while (j < m && (flags_at(s, j, &lj, &cj) & kSpace)) {
        if (cj == '\r' || cj == '\n') after_last_crlf = j + 1;
        last_start = j;
        j += lj;
      }
      if (after_last_crlf != 0) return after_last_crlf - i;
      if (j == m) return j - i;
      if (last_start > i) return last_start - i;
      return j - i;
    }
    return 0;
  }

  // Level 3 over one subject: matches and the gaps between them, in order.
  void scan_subject(std::string_view s, std::vector<std::string_view>& out) const {
    size_t i = 0, gap = std::string_view::npos;
    while (i < s.size()) {
      size_t len;
      uint32_t cp;
      uint8_t f = flags_at(s, i, &len, &cp);
      size_t n = match_at(s, i, cp, f, len);
      if (n == 0) {
        if (gap == std::string_view::npos) gap = i;
        i += len;
        continue;
      }
      if (gap != std::string_view::npos) {
        out.push_back(s.substr(gap, i - gap));
        gap = std::string_view::npos;
      }
      out.push_back(s.substr(i, n));
      i += n;
    }
    if (gap != std::string_view::npos) out.push_back(s.substr(gap));
  }

  void split_text(std::string_view text, std::vector<std::string_view>& out) const {
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
      size_t len;
      uint32_t cp;
      uint8_t f = flags_at(text, i, &len, &cp);
      if (f & kNumber) {
        size_t j = i + len;
        for (int k = 1; k < 3 && j < n; ++k) {
          size_t lj;
          uint32_t cj;
          if (!(flags_at(text, j, &lj, &cj) & kNumber)) break;
          j += lj;
        }
        out.push_back(text.substr(i, j - i));
        i = j;
        continue;
      }
      const uint8_t cjk = f & kCjk;
      size_t j = i + len;
      while (j < n) {
        size_t lj;
        uint32_t cj;
        uint8_t fj = flags_at(text, j, &lj, &cj);
        if ((fj & kNumber) || (fj & kCjk) != cjk) break;
        j += lj;
      }
      scan_subject(text.substr(i, j - i), out);
      i = j;
    }
  }
};

const Scanner& scanner() {
  static const Scanner s;
  return s;
}

inline int subject_class(uint8_t f) { return (f & kNumber) ? 0 : (f & kCjk) ? 1 : 2; }

}  // namespace

void DeepSeekPreTokenizer::split_text(std::string_view text,
                                      std::vector<std::string_view>& out) const {
  scanner().split_text(text, out);
}

void DeepSeekPreTokenizer::split(std::vector<std::string_view>& pieces,
                                 PreTokenizeScratch& scratch) const {
  scratch.tmp.clear();
  for (std::string_view p : pieces) scanner().split_text(p, scratch.tmp);
  pieces.swap(scratch.tmp);
}

size_t DeepSeekPreTokenizer::safe_split_point(std::string_view text, size_t from) const {
  const Scanner& sc = scanner();
  size_t i = from;
  while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
  if (i == 0 || i >= text.size()) return std::string_view::npos;
  // Flags of the character before i.
  size_t b = i - 1;
  while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
  uint8_t prev = sc.flags_at(text, b);
  while (i < text.size()) {
    size_t len;
    uint32_t cp;
    uint8_t f = sc.flags_at(text, i, &len, &cp);
    // A new subject starts here, or a letter/mark run ends here inside one subject: either
    // way every level has a boundary at i and nothing before i looks past it.
    int pc = subject_class(prev), cc = subject_class(f);
    if (pc != cc) return i;
    if (cc != 0 && (prev & kLM) && !(f & kLM)) return i;
    prev = f;
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace fathom::tok
