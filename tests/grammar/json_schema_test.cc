// JSON Schema compiler specifics beyond the test suite: errors name the keyword they cannot
// enforce, integer ranges, whitespace policies, key exclusion for additional properties,
// choice grammars, and the compiled-grammar cache (including sharing across threads).
#include <gtest/gtest.h>

#include <thread>

#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/test_helpers.h"

namespace fathom::grammar {
namespace {

using test::accepts;

std::shared_ptr<const CompiledGrammar> compile_schema(const char* s, JsonSchemaOptions o = {}) {
  auto g = json_schema_grammar(std::string_view(s), o);
  EXPECT_TRUE(g.is_ok()) << s << ": " << g.status().to_string();
  if (!g.is_ok()) return nullptr;
  return test::compile_or_die(g.value(), test::byte_tokens());
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"not", R"({"not": {"type": "string"}})"},
      {"patternProperties", R"({"type": "object", "patternProperties": {"^a": {}}})"},
      {"multipleOf", R"({"type": "integer", "multipleOf": 3})"},
      {"uniqueItems", R"({"type": "array", "uniqueItems": true})"},
      {"if", R"({"if": {"type": "string"}, "then": {"minLength": 2}})"},
      {"minProperties", R"({"type": "object", "minProperties": 2})"},
      {"contains", R"({"type": "array", "contains": {"type": "integer"}})"},
      {"minimum", R"({"type": "number", "minimum": 0.5})"},
      {"exclusiveMaximum", R"({"exclusiveMaximum": 2.5})"},
      {"oneOf", R"({"oneOf": [{"type": "integer"}, {"minimum": 2}]})"},
      {"format 'ipv6'", R"({"type": "string", "format": "ipv6"})"},
  };
  for (const auto& [kw, s] : cases) {
    auto g = json_schema_grammar(std::string_view(s));
    ASSERT_FALSE(g.is_ok()) << s;
    EXPECT_EQ(g.status().code(), StatusCode::kUnsupported) << g.status().to_string();
    EXPECT_NE(g.status().message().find(kw), std::string::npos) << g.status().message();
  }
  auto bad = json_schema_grammar(std::string_view(R"({"type": 5})"));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(json_schema_grammar(std::string_view("{not json")).is_ok());
  auto remote = json_schema_grammar(std::string_view(R"({"$ref": "http://x/y.json"})"));
  ASSERT_FALSE(remote.is_ok());
  EXPECT_EQ(remote.status().code(), StatusCode::kUnsupported);
}

TEST(JsonSchema, IntegerRanges) {
  struct Range {
    const char* schema;
    int64_t lo, hi;
  };
  for (const Range& r : std::vector<Range>{
           {R"({"type":"integer","minimum":-17,"maximum":243})", -17, 243},
           {R"({"type":"integer","exclusiveMinimum":9,"exclusiveMaximum":1001})", 10, 1000},
           {R"({"type":"integer","minimum":-250,"maximum":-3})", -250, -3},
           {R"({"type":"integer","minimum":1.5,"maximum":99.9})", 2, 99},
       }) {
    auto g = compile_schema(r.schema);
    ASSERT_TRUE(g);
    for (int64_t v = -1100; v <= 1100; ++v) {
      EXPECT_EQ(accepts(*g, std::to_string(v)), v >= r.lo && v <= r.hi) << r.schema << " " << v;
    }
    EXPECT_FALSE(accepts(*g, "007"));
    EXPECT_FALSE(accepts(*g, "-0"));
  }
  auto open = compile_schema(R"({"type":"integer","minimum":95})");
  ASSERT_TRUE(open);
  EXPECT_TRUE(accepts(*open, "95"));
  EXPECT_TRUE(accepts(*open, "1000000000000000000000"));
  EXPECT_FALSE(accepts(*open, "94"));
  EXPECT_FALSE(accepts(*open, "-100"));
}

TEST(JsonSchema, NumberRanges) {
  auto g = compile_schema(R"({"type":"number","minimum":-3,"exclusiveMaximum":10})");
  ASSERT_TRUE(g);
  for (const char* ok : {"-3", "-3.0", "-2.999", "-0.5", "0", "0.25", "9.99", "9", "5.000"}) {
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  }
  for (const char* bad : {"-3.01", "-4", "10", "10.0", "11", "1e2", "-0", "01.5"}) {
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  }
  auto pos = compile_schema(R"({"type":"number","exclusiveMinimum":0})");
  ASSERT_TRUE(pos);
  EXPECT_TRUE(accepts(*pos, "0.001"));
  EXPECT_TRUE(accepts(*pos, "123456.5"));
  EXPECT_FALSE(accepts(*pos, "0"));
  EXPECT_FALSE(accepts(*pos, "0.000"));
  EXPECT_FALSE(accepts(*pos, "-1"));
}

// Pydantic-style schemas: $defs, allOf with a lone $ref, anyOf with null, formats.
TEST(JsonSchema, PydanticStyle) {
  auto g = compile_schema(R"({
    "$defs": {
      "Address": {"type": "object", "title": "Address",
                  "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                  "required": ["city", "zip"], "additionalProperties": false}
    },
    "type": "object",
    "properties": {
      "home": {"allOf": [{"$ref": "#/$defs/Address"}], "description": "where"},
      "work": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": null},
      "site": {"type": "string", "format": "uri"},
      "born": {"type": "string", "format": "date"}
    },
    "required": ["home"],
    "additionalProperties": false
  })",
                          {.whitespace = JsonSchemaOptions::Whitespace::kCompact});
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, R"({"home":{"city":"Oslo","zip":"01234"}})"));
  EXPECT_TRUE(accepts(
      *g,
      R"({"home":{"city":"A","zip":"12345"},"work":null,"site":"https://x.org/a?b=c","born":"1999-12-31"})"));
  EXPECT_FALSE(accepts(*g, R"({"home":{"city":"Oslo","zip":"0123"}})"));
  EXPECT_FALSE(accepts(*g, R"({"home":{"city":"A","zip":"12345"},"site":"no scheme"})"));
  EXPECT_FALSE(accepts(*g, R"({"home":{"city":"A","zip":"12345"},"born":"1999-13-01"})"));
}

// draft 2020-12 tuples (the Debian suite has no 2020-12 folder): prefixItems, items for the
// rest (false: none), minItems/maxItems across both.
TEST(JsonSchema, PrefixItems) {
  JsonSchemaOptions compact{.whitespace = JsonSchemaOptions::Whitespace::kCompact};
  auto closed = compile_schema(
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})",
      compact);
  ASSERT_TRUE(closed);
  EXPECT_TRUE(accepts(*closed, "[]"));
  EXPECT_TRUE(accepts(*closed, "[1]"));
  EXPECT_TRUE(accepts(*closed, R"([1,"a"])"));
  EXPECT_FALSE(accepts(*closed, R"([1,"a",2])"));
  EXPECT_FALSE(accepts(*closed, R"(["a"])"));
  auto rest = compile_schema(
      R"({"type":"array","prefixItems":[{"const":"x"}],"items":{"type":"boolean"},"minItems":2,"maxItems":3})",
      compact);
  ASSERT_TRUE(rest);
  EXPECT_TRUE(accepts(*rest, R"(["x",true])"));
  EXPECT_TRUE(accepts(*rest, R"(["x",true,false])"));
  EXPECT_FALSE(accepts(*rest, R"(["x"])"));
  EXPECT_FALSE(accepts(*rest, R"(["x",true,false,true])"));
  EXPECT_FALSE(accepts(*rest, R"(["x",1])"));
}

TEST(JsonSchema, WhitespacePolicies) {
  const char* s =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"],"additionalProperties":false})";
  auto compact = compile_schema(s, {.whitespace = JsonSchemaOptions::Whitespace::kCompact});
  auto bounded = compile_schema(s, {.max_whitespace = 8});
  ASSERT_TRUE(compact && bounded);
  EXPECT_TRUE(accepts(*compact, R"({"a":[1,2]})"));
  EXPECT_FALSE(accepts(*compact, R"({"a": [1, 2]})"));
  EXPECT_TRUE(accepts(*bounded, R"({"a": [1, 2]})"));
  EXPECT_TRUE(accepts(*bounded, "{\n  \"a\": [\n    1,\n    2\n  ]\n}"));
  EXPECT_TRUE(accepts(*bounded, "{\"a\":        []}"));
  EXPECT_FALSE(accepts(*bounded, "{\"a\":         []}"));  // 9 spaces
  EXPECT_FALSE(accepts(*bounded, R"({"a" : []})"));        // no space before ':'
  EXPECT_FALSE(accepts(*bounded, R"( {"a": []})"));        // nor before the value
}

TEST(JsonSchema, AdditionalPropertiesExcludeDeclaredNames) {
  auto g = compile_schema(
      R"({"type":"object","properties":{"id":{"type":"integer"},"idx":{"type":"string"}},"additionalProperties":{"type":"boolean"}})",
      {.whitespace = JsonSchemaOptions::Whitespace::kCompact});
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, R"({"id":1,"idx":"a","other":true})"));
  EXPECT_TRUE(accepts(*g, R"({"i":true,"idxx":false,"":true})"));
  EXPECT_FALSE(accepts(*g, R"({"id":1,"id":true})"));  // a declared name again
  EXPECT_FALSE(accepts(*g, R"({"idx":"a","id":1})"));  // declared members in order
  EXPECT_FALSE(accepts(*g, R"({"x":true,"id":1})"));   // extras after declared ones
  EXPECT_FALSE(accepts(*g, R"({"other":1})"));
}

TEST(JsonSchema, StringsAreCanonical) {
  auto g = compile_schema(R"({"type":"string","maxLength":3})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, R"("a\"\\")"));
  EXPECT_TRUE(accepts(*g, R"("\u0001é\n")"));
  EXPECT_FALSE(accepts(*g, R"("abcd")"));
  EXPECT_FALSE(accepts(*g, R"("\/")"));      // not canonical
  EXPECT_FALSE(accepts(*g, R"("\u00e9")"));  // not canonical: raw UTF-8
  auto p = compile_schema(R"({"type":"string","pattern":"^[0-9]{3}-x$"})");
  ASSERT_TRUE(p);
  EXPECT_TRUE(accepts(*p, R"("123-x")"));
  EXPECT_FALSE(accepts(*p, R"("123-xy")"));
  auto search = compile_schema(R"({"type":"string","pattern":"a+b"})");
  ASSERT_TRUE(search);
  EXPECT_TRUE(accepts(*search, R"("xxaab\"")"));
  EXPECT_FALSE(accepts(*search, R"("ba")"));
}

TEST(Choice, ExactlyOneOfTheStrings) {
  auto g = choice_grammar({"yes", "no", "maybe not"});
  ASSERT_TRUE(g.is_ok());
  auto cg = test::compile_or_die(g.value(), test::byte_tokens());
  EXPECT_TRUE(accepts(*cg, "yes"));
  EXPECT_TRUE(accepts(*cg, "maybe not"));
  EXPECT_FALSE(accepts(*cg, "maybe"));
  EXPECT_FALSE(accepts(*cg, "yesno"));
  EXPECT_FALSE(choice_grammar({}).is_ok());
}

TEST(GrammarCache, LruByCanonicalText) {
  GrammarCache cache(test::byte_tokens(), 2);
  GrammarSpec a{.kind = GrammarSpec::Kind::kJsonSchema, .text = R"({"type":"integer"})"};
  GrammarSpec a2{.kind = GrammarSpec::Kind::kJsonSchema,
                 .text = R"({ "type" : "integer", "title": "same grammar" })"};
  GrammarSpec b{.kind = GrammarSpec::Kind::kRegex, .text = "[ab]+"};
  GrammarSpec c{.kind = GrammarSpec::Kind::kChoice, .choices = {"x", "y"}};
  auto ga = cache.get(a);
  ASSERT_TRUE(ga.is_ok());
  auto ga2 = cache.get(a2);
  ASSERT_TRUE(ga2.is_ok());
  EXPECT_EQ(ga.value().get(), ga2.value().get());
  EXPECT_EQ(cache.hits(), 1u);
  ASSERT_TRUE(cache.get(b).is_ok());
  ASSERT_TRUE(cache.get(c).is_ok());  // evicts a
  EXPECT_EQ(cache.size(), 2u);
  auto again = cache.get(a);
  ASSERT_TRUE(again.is_ok());
  EXPECT_NE(again.value().get(), ga.value().get());
  GrammarSpec bad{.kind = GrammarSpec::Kind::kRegex, .text = "(?=x)"};
  EXPECT_EQ(cache.get(bad).status().code(), StatusCode::kUnsupported);
}

// The cache also holds at most max_bytes of automata: a large grammar pushes the least
// recently used out (one larger than the bound is kept alone).
TEST(GrammarCache, BoundedByBytes) {
  GrammarSpec small{.kind = GrammarSpec::Kind::kRegex, .text = "[ab]+"};
  GrammarSpec other{.kind = GrammarSpec::Kind::kRegex, .text = "[cd]+"};
  std::string members;
  for (int i = 0; i < 60; ++i) members += (i ? ", " : "") + ("\"p" + std::to_string(i) + "\": {}");
  GrammarSpec large{.kind = GrammarSpec::Kind::kJsonSchema,
                    .text = R"({"type": "object", "properties": {)" + members + "}}"};
  GrammarCache probe(test::byte_tokens(), 8);
  ASSERT_TRUE(probe.get(small).is_ok());
  const size_t small_bytes = probe.bytes();
  ASSERT_TRUE(probe.get(large).is_ok());
  const size_t large_bytes = probe.bytes() - small_bytes;
  ASSERT_GT(large_bytes, 10 * small_bytes);
  EXPECT_EQ(probe.size(), 2u);

  GrammarCache cache(test::byte_tokens(), 8, {}, large_bytes + small_bytes / 2);
  ASSERT_TRUE(cache.get(small).is_ok());
  ASSERT_TRUE(cache.get(other).is_ok());
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_TRUE(cache.get(large).is_ok());  // pushes out both small ones
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), large_bytes);
  GrammarCache tiny(test::byte_tokens(), 8, {}, 1);
  ASSERT_TRUE(tiny.get(large).is_ok());
  EXPECT_EQ(tiny.size(), 1u);
  ASSERT_TRUE(tiny.get(small).is_ok());
  EXPECT_EQ(tiny.size(), 1u);
  EXPECT_EQ(tiny.bytes(), small_bytes);
}

// The canonical text (the cache's key) of an object with many optional members grows linearly
// with them (each member's tail, shared by every "first member" alternative, is printed once:
// it was quadratic, 40 s for 1,000 members), and still tells apart objects that differ only
// in their last member.
TEST(GrammarCache, CanonicalTextIsLinearInTheGrammar) {
  auto text = [](int members, const char* last_type) {
    std::string s = R"({"type": "object", "properties": {)";
    for (int i = 0; i < members; ++i)
      s += "\"p" + std::to_string(i) + "\": {\"type\": \"" +
           (i + 1 == members ? last_type : "string") + "\"}" + (i + 1 < members ? ", " : "}}");
    auto g = json_schema_grammar(std::string_view(s));
    EXPECT_TRUE(g.is_ok()) << g.status().to_string();
    return g.is_ok() ? g.value().to_string() : std::string();
  };
  const size_t small = text(50, "string").size(), large = text(400, "string").size();
  EXPECT_LT(large, small * 12) << small << " -> " << large;  // 8x the members
  EXPECT_NE(text(400, "string"), text(400, "integer"));
  EXPECT_EQ(text(400, "integer"), text(400, "integer"));
  // Compiled, the object still takes any subset of its members in order, and nothing else.
  auto cg = compile_schema(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},)"
      R"("c":{"type":"integer"},"d":{"type":"integer"},"e":{"type":"integer"},)"
      R"("f":{"type":"integer"},"g":{"type":"integer"},"h":{"type":"integer"}}})");
  ASSERT_TRUE(cg);
  EXPECT_TRUE(accepts(*cg, R"({"a": 1, "h": 8})"));
  EXPECT_TRUE(accepts(*cg, R"({"c": 3, "d": 4, "g": 7})"));
  EXPECT_TRUE(accepts(*cg, R"({})"));
  EXPECT_FALSE(accepts(*cg, R"({"d": 4, "c": 3})"));
  EXPECT_FALSE(accepts(*cg, R"({"a": 1, "a": 1})"));
}

// One compiled grammar, several matchers on several threads at once (its mask cache fills
// concurrently): every thread sees the same masks.
TEST(CompiledGrammar, SharedAcrossThreads) {
  auto cg = compile_schema(
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{}}}})");
  ASSERT_TRUE(cg);
  const std::string text = R"({"a": "hello", "b": [1, {"c": [true, null]}, "d"]})";
  auto run = [&](std::vector<std::vector<uint32_t>>& out) {
    GrammarMatcher m(cg);
    std::vector<uint32_t> mask(m.mask_words());
    for (char c : text) {
      m.fill_next_token_bitmask(mask.data());
      out.push_back(mask);
      if (!m.accept_token(uint8_t(c))) return;
    }
  };
  std::vector<std::vector<std::vector<uint32_t>>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&run, &r] { run(r); });
  for (auto& t : threads) t.join();
  ASSERT_EQ(results[0].size(), text.size());
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]);
}

}  // namespace
}  // namespace fathom::grammar
