// Every grammar reader fed garbage: random mutations of valid regexes, GBNF grammars and JSON
// schemas, and pathological nesting, must give a Status (or a grammar that compiles), never
// crash or hang.
#include <gtest/gtest.h>

#include <random>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/test_helpers.h"

namespace fathom::grammar {
namespace {

std::string mutate(std::string s, std::mt19937& rng) {
  const char alphabet[] = "()[]{}|*+?^$\\.-:,\"'#=<>0123456789abcxyz \n\t";
  int edits = 1 + int(rng() % 4);
  for (int i = 0; i < edits; ++i) {
    size_t at = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 3) {
      case 0:
        if (!s.empty()) s.erase(at, 1);
        break;
      case 1:
        s.insert(at, 1, alphabet[rng() % (sizeof alphabet - 1)]);
        break;
      default:
        if (!s.empty()) s[at] = char(rng() % 256);
    }
  }
  return s;
}

template <typename Parse>
void fuzz(const std::vector<std::string>& seeds, Parse parse, uint32_t seed) {
  std::mt19937 rng(seed);
  int ok = 0, errors = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = mutate(seeds[i % seeds.size()], rng);
    auto g = parse(text);
    if (!g.is_ok()) {
      EXPECT_FALSE(g.status().message().empty());
      ++errors;
      continue;
    }
    auto cg = CompiledGrammar::compile(g.value(), test::byte_tokens());
    if (cg.is_ok()) {
      GrammarMatcher m(cg.value());
      std::vector<uint32_t> mask(m.mask_words());
      m.fill_next_token_bitmask(mask.data());
      (void)m.find_jump_forward_string();
      ++ok;
    } else {
      ++errors;
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

TEST(Garbage, Regex) {
  fuzz(
      {"a(b|cd)*e{2,3}[x-z]?", "[^a-c\\d]+\\.\\w{1,4}", "(?:ab|c)+$", "^\\u00e9{2}.*"},
      [](const std::string& t) { return regex_grammar(t); }, 11);
}

TEST(Garbage, Gbnf) {
  fuzz(
      {"root ::= a+ \"x\"\na ::= [a-z] | \"(\" root \")\"\n",
       "root ::= (\"yes\" | \"no\"){1,3} # c\n", "root ::= [^\\n]* \"\\u00e9\"\n"},
      [](const std::string& t) { return gbnf_grammar(t); }, 12);
}

TEST(Garbage, JsonSchema) {
  fuzz(
      {R"({"type":"object","properties":{"a":{"type":"integer","minimum":2}},"required":["a"]})",
       R"({"anyOf":[{"type":"string","maxLength":3},{"type":"array","items":{"$ref":"#"}}]})",
       R"({"enum":["x",1,null,{"k":[true]}]})"},
      [](const std::string& t) { return json_schema_grammar(std::string_view(t)); }, 13);
}

TEST(Garbage, DeepNesting) {
  std::string deep(100000, '(');
  EXPECT_FALSE(regex_grammar(deep + "a" + std::string(100000, ')')).is_ok());
  EXPECT_FALSE(
      gbnf_grammar("root ::= " + deep + "\"a\"" + std::string(100000, ')') + "\n").is_ok());
  std::string stacked = "root ::= \"a\"" + std::string(100000, '?') + "\n";
  auto g = gbnf_grammar(stacked);
  if (g.is_ok()) {
    EXPECT_FALSE(CompiledGrammar::compile(g.value(), test::byte_tokens()).is_ok());
  }
  EXPECT_FALSE(regex_grammar("a**").is_ok());
  std::string chain;
  for (int i = 0; i < 5000; ++i)
    chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r5000 ::= \"x\"\nroot ::= r0\n";
  auto c = gbnf_grammar(chain);
  ASSERT_TRUE(c.is_ok());
  EXPECT_FALSE(CompiledGrammar::compile(c.value(), test::byte_tokens()).is_ok());
}

}  // namespace
}  // namespace fathom::grammar
