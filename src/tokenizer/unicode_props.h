// Unicode character classes used by the pre-tokenizers, as Oniguruma (the regex engine behind
// Hugging Face `tokenizers`) defines them: general categories L, M, N, P, S and Pc, the \s
// set (White_Space), and membership in DeepSeek's CJK/kana split class. The table is built
// once per process from utf8proc (Unicode 15) on first use; lookups are lock-free.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace fathom::tok {

enum CharFlag : uint8_t {
  kLetter = 1,       // \p{L}
  kMark = 2,         // \p{M}
  kNumber = 4,       // \p{N}
  kPunct = 8,        // \p{P}
  kSymbol = 16,      // \p{S}
  kSpace = 32,       // \s (Unicode White_Space, which includes U+0085)
  kCjk = 64,         // [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]
  kConnector = 128,  // \p{Pc} (part of \w)
};

struct CharTable {
  const uint16_t* stage1;  // cp >> 8 -> block index
  const uint8_t* stage2;   // block * 256 + (cp & 255) -> flags
};

const CharTable& char_table();
// The Unicode version the table was generated from.
const char* unicode_version();

inline uint8_t char_flags(const CharTable& t, uint32_t cp) {
  if (cp > 0x10FFFF) return 0;
  return t.stage2[(uint32_t(t.stage1[cp >> 8]) << 8) | (cp & 0xFF)];
}
inline uint8_t char_flags(uint32_t cp) { return char_flags(char_table(), cp); }

// The general category of cp (an index; general_category_name gives "Lu", "Nd", ...).
// A binary search: for building regex classes, not for hot loops.
int general_category(uint32_t cp);
const char* general_category_name(int category);
// The maximal code-point ranges [first, last] whose category is in `member` (indexed by
// general_category()), surrogates excluded. Walks the generated runs directly.
std::vector<std::pair<uint32_t, uint32_t>> category_ranges(const bool member[32]);

// \w as Rust's regex crate defines it (alphanumeric, marks, connector punctuation, joiners).
inline bool is_word_char(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  return (char_flags(cp) & (kLetter | kMark | kNumber | kConnector)) != 0;
}

}  // namespace fathom::tok
