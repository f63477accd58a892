// Regex front end: strings generated from each pattern (and random mutations of them) are
// accepted exactly when PCRE2 full-matches them (ASCII samples, where PCRE2's and
// ECMAScript's classes agree).
#include <gtest/gtest.h>

#include <random>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/regex.h"
#include "grammar/test_helpers.h"

namespace fathom::grammar {
namespace {

using test::accepts;

std::shared_ptr<const CompiledGrammar> compile_regex(const std::string& p) {
  auto g = regex_grammar(p);
  EXPECT_TRUE(g.is_ok()) << p << ": " << g.status().to_string();
  if (!g.is_ok()) return nullptr;
  return test::compile_or_die(g.value(), test::byte_tokens());
}

TEST(Regex, Basics) {
  auto g = compile_regex("a(b|cd)*e{2,3}[x-z]?");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "aee"));
  EXPECT_TRUE(accepts(*g, "abcdbeeey"));
  EXPECT_FALSE(accepts(*g, "ae"));
  EXPECT_FALSE(accepts(*g, "aeeee"));
  EXPECT_FALSE(accepts(*g, "abcdbeeeyy"));
}

TEST(Regex, UnicodeClasses) {
  auto g = compile_regex("[^a]é.");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "béx"));
  EXPECT_TRUE(accepts(*g, "😀é中"));
  EXPECT_FALSE(accepts(*g, "aéx"));
  EXPECT_FALSE(accepts(*g, "bé\n"));
}

TEST(Regex, UnsupportedConstructsAreErrors) {
  for (const char* p : {"(?=a)b", "(a)\\1", "a\\bc", "\\p{L}", "a^b", "a$b"}) {
    auto g = regex_grammar(p);
    EXPECT_FALSE(g.is_ok()) << p;
    if (!g.is_ok()) {
      EXPECT_EQ(g.status().code(), StatusCode::kUnsupported) << p;
    }
  }
  for (const char* p : {"(a", "a)", "[a", "*a", "a{3,2}", "\\q"}) {
    auto g = regex_grammar(p);
    EXPECT_FALSE(g.is_ok()) << p;
  }
}

// Generates strings a pattern might match: random walks through the byte automaton, then a
// random mutation to exercise rejection.
std::string random_walk(const CompiledGrammar& g, std::mt19937& rng, size_t max_len) {
  std::shared_ptr<const CompiledGrammar> alias(std::shared_ptr<const CompiledGrammar>{}, &g);
  GrammarMatcher m(alias);
  std::string s;
  std::vector<uint32_t> mask(m.mask_words());
  while (s.size() < max_len) {
    m.fill_next_token_bitmask(mask.data());
    std::vector<int> allowed;
    for (int b = 0; b < 257; ++b) {
      if (mask[b / 32] >> (b % 32) & 1) allowed.push_back(b);
    }
    if (allowed.empty()) break;
    int pick = allowed[rng() % allowed.size()];
    if (pick == 256) {
      if (rng() % 3 == 0 || allowed.size() == 1) break;
      pick = allowed[rng() % allowed.size()];
      if (pick == 256) break;
    }
    EXPECT_TRUE(m.accept_token(pick));
    s += char(pick);
  }
  return s;
}

// A compiled PCRE2 pattern matched against the whole subject.
class Pcre2 {
 public:
  explicit Pcre2(const char* pattern) {
    int err;
    PCRE2_SIZE off;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF, &err, &off, nullptr);
    data_ = code_ ? pcre2_match_data_create_from_pattern(code_, nullptr) : nullptr;
  }
  ~Pcre2() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  bool ok() const { return code_ != nullptr; }
  bool full_match(const std::string& s) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data_,
                       nullptr) >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

TEST(Regex, AgreesWithPcre2) {
  const char* patterns[] = {
      "[a-c]+x?",
      "(ab|a)(bc|c)",
      "\\d{3}-\\d{4}",
      "[A-Za-z_]\\w{0,5}",
      "(foo|bar|baz)*qux",
      "a{2}b{1,}c{0,2}",
      "[^0-9\\s]{1,4}",
      "x(y(z)?)?",
      "\\s*[-+]?\\d+(\\.\\d+)?",
      "(0|[1-9][0-9]*)",
      "[.][*]\\+\\?",
      "(a|b|)c",
      "[\\x41-\\x43]{2}",
      "(?:ab)+(?:cd)?",
      "\\W\\D\\S",
      "h.llo",
  };
  std::mt19937 rng(7);
  int checked = 0;
  for (const char* p : patterns) {
    auto g = compile_regex(p);
    ASSERT_TRUE(g) << p;
    Pcre2 re(p);
    ASSERT_TRUE(re.ok()) << p;
    for (int i = 0; i < 200; ++i) {
      std::string s = random_walk(*g, rng, 12);
      // Mutate half of them.
      if (i % 2 && !s.empty()) {
        size_t at = rng() % s.size();
        const char alphabet[] = "abcxyz0129 -+._";
        if (rng() % 2) {
          s[at] = alphabet[rng() % (sizeof alphabet - 1)];
        } else {
          s.insert(at, 1, alphabet[rng() % (sizeof alphabet - 1)]);
        }
      }
      bool ascii = true;
      for (unsigned char c : s) ascii = ascii && c < 0x80;
      if (!ascii) continue;
      EXPECT_EQ(accepts(*g, s), re.full_match(s)) << "pattern " << p << " on '" << s << "'";
      ++checked;
    }
  }
  EXPECT_GT(checked, 2000);
}

}  // namespace
}  // namespace fathom::grammar
