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

// Expressions form a DAG, and a walk that expands it as a tree takes time exponential in its
// depth: a chain of 64 alternations whose two branches are the same subexpression is a tree
// of 2^64 nodes (its language: "a"). Compiling it must visit each node once; the rule-reference
// scan did not (a JSON object with 20,000 optional members took 3 minutes to be refused).
TEST(Garbage, SharedSubexpressionsAreWalkedOnce) {
  Grammar g;
  const int32_t root = g.add_rule("root");
  ExprId e = g.literal("a");
  for (int i = 0; i < 64; ++i) e = g.alt({e, e});
  g.define_rule(root, e);
  g.set_root(root);
  auto cg = CompiledGrammar::compile(g, test::byte_tokens());
  ASSERT_TRUE(cg.is_ok()) << cg.status().to_string();
  EXPECT_TRUE(test::accepts(*cg.value(), "a"));
  EXPECT_FALSE(test::accepts(*cg.value(), "aa"));
}

// Nested bounded repetitions blow the subset construction up (the language is a{1,10^6}, each
// automaton state a set of up to 10^6 NFA states): the compile stops at the limit on that
// work with a "too large" error instead of running for minutes; an object with many optional
// members (large state sets, but bounded) still compiles under the default limits.
TEST(Garbage, SubsetConstructionWorkIsBounded) {
  auto g = regex_grammar("((a{1,100}){1,100}){1,100}");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  CompileOptions small;
  small.limits.max_subset_states = 2'000'000;
  auto cg = CompiledGrammar::compile(g.value(), test::byte_tokens(), small);
  ASSERT_FALSE(cg.is_ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(cg.status().message().find("states of the NFA"), std::string::npos)
      << cg.status().message();
  std::string schema = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 100; ++i) schema += (i ? ", " : "") + ("\"p" + std::to_string(i) + "\": {}");
  auto object = json_schema_grammar(std::string_view(schema + "}}"));
  ASSERT_TRUE(object.is_ok()) << object.status().to_string();
  EXPECT_TRUE(CompiledGrammar::compile(object.value(), test::byte_tokens()).is_ok());
}

}  // namespace
}  // namespace fathom::grammar
