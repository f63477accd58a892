// The hand-written DeepSeek pre-tokenizer against the general PCRE2 path running DeepSeek's
// three regexes: on the golden corpus (ids) and on random strings (pieces, and the safe
// split points used for parallel encoding).
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/utf8.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/test_util.h"
#include "tokenizer/unicode_props.h"

namespace fathom::test {
namespace {

using tok::DeepSeekPreTokenizer;

// Code points that the regex path (PCRE2, with \p{..} and \s rewritten from Fathom's table)
// classifies differently from the table itself: there must be none, or the regex path
// would disagree with HF wherever PCRE2's own Unicode 14 data is older than HF's.
const std::vector<bool>& pcre2_disagrees() {
  static auto* v = [] {
    auto* out = new std::vector<bool>(0x110000, false);
    const char* patterns[] = {"^\\p{L}$", "^\\p{M}$", "^\\p{N}$", "^\\p{P}$", "^\\p{S}$", "^\\s$"};
    const uint8_t bits[] = {tok::kLetter, tok::kMark,   tok::kNumber,
                            tok::kPunct,  tok::kSymbol, tok::kSpace};
    std::vector<std::unique_ptr<tok::Regex>> res;
    for (const char* p : patterns) res.push_back(std::move(tok::Regex::compile(p)).value());
    tok::RegexScratch scratch;
    std::string s;
    for (uint32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      s.clear();
      utf8::append(s, cp);
      uint8_t f = tok::char_flags(cp);
      for (size_t k = 0; k < res.size(); ++k) {
        size_t a, b;
        bool m = res[k]->find(s, 0, &a, &b, scratch);
        if (m != bool(f & bits[k])) (*out)[cp] = true;
      }
    }
    return out;
  }();
  return *v;
}

TEST(RegexPath, ClassesAgreeWithTheTableOnEveryCodePoint) {
  size_t n = 0;
  for (bool b : pcre2_disagrees()) n += b;
  EXPECT_EQ(n, 0u);
}

TEST(RegexPath, TranslatesWhitespaceClassToOnigurumaSemantics) {
  const std::string ws =
      "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{"
      "202F}\\x{205F}\\x{3000}";
  EXPECT_EQ(tok::Regex::translate_oniguruma("\\s+(?!\\S)"), "[" + ws + "]+(?![^" + ws + "])");
  std::string letters = tok::Regex::translate_oniguruma("\\p{L}");
  ASSERT_EQ(letters.substr(0, 20), "[\\x{41}-\\x{5A}\\x{61}");
  EXPECT_EQ(tok::Regex::translate_oniguruma("[^\\s\\p{L}]"),
            "[^" + ws + letters.substr(1, letters.size() - 2) + "]");
  EXPECT_EQ(tok::Regex::translate_oniguruma("\\P{L}"), "[^" + letters.substr(1));
  EXPECT_EQ(tok::Regex::translate_oniguruma("\\p{Lu}").substr(0, 33),
            "[\\x{41}-\\x{5A}\\x{C0}-\\x{D6}\\x{D8}");
  EXPECT_EQ(tok::Regex::translate_oniguruma("\\p{Han}"), "\\p{Han}");  // scripts are left to PCRE2
  EXPECT_EQ(tok::Regex::translate_oniguruma("[]\\s]"), "[]" + ws + "]");
  EXPECT_EQ(tok::Regex::translate_oniguruma("a\\\\s"), "a\\\\s");  // an escaped backslash, then 's'
}

TEST(RegexPath, GoldenCorpusThroughPcre2) {
  const Tokenizer& slow = deepseek(false);
  ASSERT_FALSE(slow.uses_fast_pre_tokenizer());
  auto cases = read_jsonl(data_path("tokenizer/corpus_dev.jsonl"));
  ASSERT_EQ(cases.size(), 2130u);
  for (const auto& c : cases) {
    std::string text = c["text"].get<std::string>();
    EXPECT_EQ(*slow.encode(text), c["ids"].get<std::vector<int32_t>>()) << c["id"];
    EXPECT_EQ(*slow.encode_plain(text), c["ids_plain"].get<std::vector<int32_t>>()) << c["id"];
  }
}

std::vector<std::string_view> regex_pieces(const tok::PreTokenizer& p, std::string_view text) {
  tok::PreTokenizeScratch s;
  std::vector<std::string_view> pieces = {text};
  if (text.empty()) return {};
  p.split(pieces, s);
  return pieces;
}

std::unique_ptr<tok::PreTokenizer> deepseek_regex_pre_tokenizer() {
  std::vector<std::unique_ptr<tok::PreTokenizer>> steps;
  for (const char* p : {DeepSeekPreTokenizer::kDigitsPattern, DeepSeekPreTokenizer::kCjkPattern,
                        DeepSeekPreTokenizer::kMainPattern}) {
    steps.push_back(
        std::move(tok::SplitPreTokenizer::from_regex(p, tok::SplitBehavior::kIsolated, false))
            .value());
  }
  return std::make_unique<tok::SequencePreTokenizer>(std::move(steps));
}

// Characters that stress the pattern: every class, the alternation edges, CR/LF runs,
// Oniguruma-only whitespace (U+0085), the CJK class edges, combining marks, controls.
std::vector<uint32_t> interesting_chars() {
  std::vector<uint32_t> v = {
      'a',     'Z',     'q',    ' ',      ' ',     ' ',    '\t',   '\n',    '\r',    '\v',
      '\f',    0x85,    0xA0,   0x3000,   0x2028,  0x2029, 0x1680, 0x200B,  0xFEFF,  0x180E,
      '0',     '7',     0x663,  0xFF17,   0xB2,    0x2163, '.',    ',',     '!',     '\'',
      '"',     '-',     '_',    '(',      ']',     '{',    '~',    '$',     '+',     '<',
      '=',     '^',     '`',    '|',      '@',     '#',    0x300,  0x301,   0x20DD,  0x4E00,
      0x9FA5,  0x9FA6,  0x3040, 0x3041,   0x309F,  0x30A0, 0x30FB, 0x30FC,  0x30FF,  0x3001,
      0x3002,  0xFF0C,  0xE9,   0x3B1,    0x416,   0x5D0,  0x627,  0x915,   0xE01,   0xAC00,
      0x1F600, 0x1F3FD, 0x200D, 0xFE0F,   0x1F1FA, 0x0,    0x1,    0x1B,    0x7F,    0x9F,
      0xAD,    0xE000,  0xFFFE, 0x10FFFF, 0x2030,  0x20AC, 0x221E, 0x1D400, 0x10400, 0x2E80};
  return v;
}

std::string random_string(std::mt19937& rng, const std::vector<uint32_t>& alphabet,
                          size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len), pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<uint32_t> any(1, 0x10FFFF);
  std::string s;
  size_t n = len(rng);
  for (size_t i = 0; i < n; ++i) {
    uint32_t cp = alphabet[pick(rng)];
    if (rng() % 16 == 0) {  // now and then an arbitrary code point
      cp = any(rng);
      if ((cp >= 0xD800 && cp <= 0xDFFF) || pcre2_disagrees()[cp]) cp = 'x';
    }
    utf8::append(s, cp);
  }
  return s;
}

TEST(RegexPath, FastPiecesEqualRegexPiecesOnRandomStrings) {
  DeepSeekPreTokenizer fast;
  auto slow = deepseek_regex_pre_tokenizer();
  std::mt19937 rng(1234);
  auto alphabet = interesting_chars();
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s = random_string(rng, alphabet, 24);
    std::vector<std::string_view> a;
    fast.split_text(s, a);
    auto b = regex_pieces(*slow, s);
    ASSERT_EQ(a, b) << "string #" << iter;
  }
}

TEST(RegexPath, SafeSplitPointsDoNotChangePieces) {
  DeepSeekPreTokenizer fast;
  std::mt19937 rng(99);
  auto alphabet = interesting_chars();
  size_t checked = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = random_string(rng, alphabet, 40);
    std::vector<std::string_view> whole;
    fast.split_text(s, whole);
    for (size_t from = 0; from < s.size(); ++from) {
      size_t p = fast.safe_split_point(s, from);
      if (p == std::string_view::npos) continue;
      ASSERT_GE(p, from);
      ASSERT_LT(p, s.size());
      std::vector<std::string_view> parts;
      fast.split_text(std::string_view(s).substr(0, p), parts);
      fast.split_text(std::string_view(s).substr(p), parts);
      ASSERT_EQ(parts.size(), whole.size()) << "split at " << p << " of string #" << iter;
      for (size_t k = 0; k < parts.size(); ++k) ASSERT_EQ(parts[k], whole[k]);
      ++checked;
    }
  }
  EXPECT_GT(checked, 10000u);
}

}  // namespace
}  // namespace fathom::test
