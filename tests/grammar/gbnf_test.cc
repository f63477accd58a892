// GBNF front end: grammars in the style of llama.cpp's grammars/ folder (written here, not
// copied) accept known-good strings and reject known-bad ones; malformed grammars and left
// recursion are errors.
#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar/test_helpers.h"

namespace fathom::grammar {
namespace {

using test::accepts;
using test::accepts_prefix;

std::shared_ptr<const CompiledGrammar> compile_gbnf(const char* text) {
  auto g = gbnf_grammar(text);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  if (!g.is_ok()) return nullptr;
  return test::compile_or_die(g.value(), test::byte_tokens());
}

// A JSON grammar in GBNF (recursive value/object/array rules, escapes, numbers).
const char* kJson = R"G(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)G";

TEST(Gbnf, Json) {
  auto g = compile_gbnf(kJson);
  ASSERT_TRUE(g);
  for (const char* good : {
           R"({})",
           R"({"a": 1})",
           R"({"a": [1, 2.5, -3e5, true, null, "x\n\u00e9"], "b": {"c": {}}})",
           "{\n  \"k\": \"v\"\n}",
           R"({"emoji": "😀"})",
       }) {
    EXPECT_TRUE(accepts(*g, good)) << good;
  }
  for (const char* bad : {
           R"([1, 2])",          // root is an object
           R"({"a": 01})",       // leading zero... "0" then "1" is not allowed
           R"({"a": 1,})",       // trailing comma
           R"({'a': 1})",        // single quotes
           R"({"a": "\q"})",     // bad escape
           R"({"a": tru})",      // truncated literal
           "{\"a\": \"\x01\"}",  // raw control character
       }) {
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  }
  EXPECT_TRUE(accepts_prefix(*g, R"({"a": [1, {"b)"));
}

const char* kArithmetic = R"G(
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)G";

TEST(Gbnf, Arithmetic) {
  auto g = compile_gbnf(kArithmetic);
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "1+2=3\n"));
  EXPECT_TRUE(accepts(*g, "(x_1 *(y+2))/4 = z\nfoo=1\n"));
  EXPECT_FALSE(accepts(*g, "1+2=3"));     // missing newline
  EXPECT_FALSE(accepts(*g, "(1+2=3\n"));  // unbalanced
  EXPECT_FALSE(accepts(*g, "1++2=3\n"));  // two operators
  EXPECT_FALSE(accepts(*g, "X=1\n"));     // upper-case identifier
}

const char* kList = R"G(
root ::= item+
# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
)G";

TEST(Gbnf, List) {
  auto g = compile_gbnf(kList);
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "- milk\n- eggs ü\n"));
  EXPECT_FALSE(accepts(*g, "- milk"));
  EXPECT_FALSE(accepts(*g, "* milk\n"));
  EXPECT_FALSE(accepts(*g, "- \n"));
  EXPECT_FALSE(accepts(*g, "- a\u2028b\n"));
}

const char* kChessLike = R"G(
root   ::= "1. " move " " move (" " [1-9] [0-9]? ". " move " " move){0,3}
move   ::= (pawn | piece | castle) ("+" | "#")?
pawn   ::= ([a-h] "x")? [a-h] [1-8] ("=" [QRBN])?
piece  ::= [KQRBN] [a-h]? [1-8]? "x"? [a-h] [1-8]
castle ::= "O-O" "-O"?
)G";

TEST(Gbnf, BoundedRepetitionAndOptionalParts) {
  auto g = compile_gbnf(kChessLike);
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "1. e4 e5 2. Nf3 Nc6 3. Bb5 a6"));
  EXPECT_TRUE(accepts(*g, "1. O-O-O exd8=Q+"));
  EXPECT_FALSE(accepts(*g, "1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. Ba4 Nf6 5. O-O Be7"));  // 5 moves
  EXPECT_FALSE(accepts(*g, "1. e9 e5"));
  EXPECT_FALSE(accepts(*g, "1. Ze4 e5"));
}

TEST(Gbnf, Errors) {
  struct Case {
    const char* text;
    StatusCode code;
  };
  for (const Case& c : std::vector<Case>{
           {"root ::= foo\n", StatusCode::kInvalidArgument},            // undefined rule
           {"start ::= \"a\"\n", StatusCode::kInvalidArgument},         // no root
           {"root ::= \"a\n", StatusCode::kInvalidArgument},            // unterminated
           {"root ::= [a-\n", StatusCode::kInvalidArgument},            // unterminated class
           {"root ::= (\"a\"\n", StatusCode::kInvalidArgument},         // missing )
           {"root ::= \"a\"{3,1}\n", StatusCode::kInvalidArgument},     // bad bounds
           {"root ::= \"a\" \"\\q\"\n", StatusCode::kInvalidArgument},  // bad escape
           {"root ::= <[1000]>\n", StatusCode::kUnsupported},           // token reference
           {"root ::= \"a\"\nroot ::= \"b\"\n", StatusCode::kInvalidArgument},  // twice
       }) {
    auto g = gbnf_grammar(c.text);
    ASSERT_FALSE(g.is_ok()) << c.text;
    EXPECT_EQ(g.status().code(), c.code) << c.text << ": " << g.status().to_string();
  }
  // Left recursion is found when the automaton is built.
  auto g = gbnf_grammar("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n");
  ASSERT_TRUE(g.is_ok());
  auto cg = CompiledGrammar::compile(g.value(), test::byte_tokens());
  ASSERT_FALSE(cg.is_ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kUnsupported) << cg.status().to_string();
  // A grammar that accepts nothing.
  auto none = gbnf_grammar("root ::= \"a\" root\n");
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(CompiledGrammar::compile(none.value(), test::byte_tokens()).is_ok());
}

TEST(Matcher, RollbackJumpForwardAndTermination) {
  auto g = compile_gbnf("root ::= \"{\\\"name\\\": \\\"\" [a-z]+ \"\\\"}\"\n");
  ASSERT_TRUE(g);
  GrammarMatcher m(g);
  EXPECT_EQ(m.find_jump_forward_string(), "{\"name\": \"");
  ASSERT_TRUE(m.accept_bytes("{\"name\": \"ab"));
  EXPECT_EQ(m.find_jump_forward_string(), "");
  EXPECT_FALSE(m.accept_token('1'));
  EXPECT_FALSE(m.can_terminate());
  EXPECT_TRUE(m.accept_token('"'));
  EXPECT_EQ(m.find_jump_forward_string(), "}");
  EXPECT_TRUE(m.accept_token('}'));
  EXPECT_TRUE(m.can_terminate());
  std::vector<uint32_t> mask(m.mask_words());
  m.fill_next_token_bitmask(mask.data());
  for (int id = 0; id < 257; ++id) {
    EXPECT_EQ(mask[id / 32] >> (id % 32) & 1, id == 256 ? 1u : 0u) << id;
  }
  EXPECT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token('x'));
  ASSERT_TRUE(m.rollback(3));  // the stop token, '}' and '"'
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.accept_token('c'));
  EXPECT_FALSE(m.rollback(10));
  m.reset();
  EXPECT_EQ(m.history_size(), 0u);
  EXPECT_EQ(m.find_jump_forward_string(), "{\"name\": \"");
}

// On DeepSeek's vocabulary: longest_prefix is the longest usable token the text starts with
// (checked against every token), and the jump-forward tokens spell the forced string.
TEST(Matcher, JumpForwardTokensAreTheLongestTokensOfTheForcedString) {
  auto table = test::deepseek_tokens();
  for (std::string_view text : {"{\"name\": \"", "\"description\":", "xyzzy", "  \n}", "é€", "a"}) {
    size_t want_len = 0;
    for (int32_t id = 0; id < int32_t(table->vocab_size()); ++id) {
      const std::string_view b = table->bytes(id);
      if (table->usable(id) && b.size() > want_len && text.substr(0, b.size()) == b)
        want_len = b.size();
    }
    const auto [id, len] = table->longest_prefix(text);
    EXPECT_EQ(len, want_len) << text;
    if (want_len > 0) {
      ASSERT_GE(id, 0);
      EXPECT_TRUE(table->usable(id));
      EXPECT_EQ(table->bytes(id), text.substr(0, len));
    }
  }
  auto g = gbnf_grammar("root ::= \"{\\\"description\\\": \\\"\" [a-z]+ \"\\\"}\"\n");
  ASSERT_TRUE(g.is_ok());
  auto cg = test::compile_or_die(*g, table);
  GrammarMatcher m(cg);
  const std::vector<int32_t> jump = m.jump_forward_tokens(16);
  std::string spelled;
  for (int32_t id : jump) spelled += table->bytes(id);
  EXPECT_EQ(spelled, "{\"description\": \"");
  EXPECT_LT(jump.size(), 8u);  // multi-byte tokens, not bytes
  EXPECT_EQ(m.jump_forward_tokens(1).size(), 1u);
  EXPECT_EQ(m.history_size(), 0u);  // the state is unchanged
  for (int32_t id : jump) ASSERT_TRUE(m.accept_token(id));
  EXPECT_TRUE(m.jump_forward_tokens(16).empty());
}

}  // namespace
}  // namespace fathom::grammar
