// The DSML tool-call grammar against DeepSeek's reference output: every V4.1 golden parse case
// with tool calls (tests/data/encoding/v41, from DeepSeek's encoder and its tests) must be
// accepted by the strict grammar of tools whose schemas the case's parsed arguments imply,
// byte for byte and token by token (the marker as its special id); the unspaced V4 tags, a
// marker spelled as text, unknown tools, missing or extra parameters and values outside the
// schema are refused.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/py_json.h"
#include "grammar/dsml.h"
#include "grammar/test_helpers.h"
#include "tokenizer/tokenizer.h"
#include "v41_fixture_path.h"

namespace fathom::grammar {
namespace {

using pyjson::Value;
using test::accepts;
using test::compile_or_die;

const std::string kMarkerText = "｜DSML｜";
const std::string kMarker(1, char(TokenTable::symbol_byte(0)));

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

Value parse(const std::string& s) {
  auto v = pyjson::parse(s);
  EXPECT_TRUE(v.is_ok()) << s;
  return v.is_ok() ? *v : Value();
}

const char* type_of(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNull:
      return "null";
    case Value::Kind::kBool:
      return "boolean";
    case Value::Kind::kInt:
      return "integer";
    case Value::Kind::kFloat:
      return "number";
    case Value::Kind::kString:
      return "string";
    case Value::Kind::kArray:
      return "array";
    case Value::Kind::kObject:
      return "object";
  }
  return "null";
}

struct GoldenCase {
  std::string id;
  std::string output;  // after </think>, without EOS
  std::vector<DsmlTool> tools;
};

// The golden cases with tool calls, each with strict tools whose schemas its calls imply (a
// key's type from its values, required when every call has it, in first-seen order). Cases
// whose arguments are not JSON, or whose calls disagree on key order or mix types, are skipped.
std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> out;
  for (const char* file : {"/encoding/v41/parse_dev.jsonl",
                           "/encoding/v41/official_inline/parse_official_inline.jsonl"}) {
    std::ifstream in(std::string(FATHOM_TEST_DATA) + file);
    EXPECT_TRUE(in.good()) << file;
    std::string line;
    while (std::getline(in, line)) {
      Value c = parse(line);
      const Value* parsed = c.find("parsed");
      const Value* calls = parsed ? parsed->find("tool_calls") : nullptr;
      if (calls == nullptr || !calls->is_array() || calls->items.empty()) continue;
      std::string text = c.find("completion")->text;
      if (size_t p = text.find("</think>"); p != std::string::npos) text = text.substr(p + 8);
      const std::string eos = "<｜end▁of▁sentence｜>";
      if (text.size() >= eos.size() && text.compare(text.size() - eos.size(), eos.size(), eos) == 0)
        text.resize(text.size() - eos.size());
      struct Seen {
        std::vector<std::string> order;
        std::map<std::string, std::vector<std::string>> types;
        std::map<std::string, int> count;
        int calls = 0;
      };
      std::map<std::string, Seen> tools;
      std::vector<std::string> tool_order;
      bool ok = true;
      for (const Value& call : calls->items) {
        const Value* fn = call.find("function");
        const std::string name = fn->find("name")->text;
        auto args = pyjson::parse(fn->find("arguments")->text);
        if (!args.is_ok() || !args->is_object()) {
          ok = false;
          break;
        }
        if (!tools.count(name)) tool_order.push_back(name);
        Seen& s = tools[name];
        ++s.calls;
        size_t last = 0;
        for (size_t i = 0; i < args->keys.size(); ++i) {
          const std::string& k = args->keys[i];
          auto it = std::find(s.order.begin(), s.order.end(), k);
          if (it == s.order.end()) {
            s.order.push_back(k);
            it = s.order.end() - 1;
          }
          if (size_t(it - s.order.begin()) < last) ok = false;  // another order
          last = size_t(it - s.order.begin());
          const std::string t = type_of(args->items[i]);
          auto& ts = s.types[k];
          if (std::find(ts.begin(), ts.end(), t) == ts.end()) ts.push_back(t);
          ++s.count[k];
        }
      }
      if (!ok) continue;
      GoldenCase g;
      g.id = c.find("id")->text;
      g.output = replace_all(text, kMarkerText, kMarker);
      for (const std::string& name : tool_order) {
        const Seen& s = tools[name];
        std::string schema = R"({"type":"object","properties":{)";
        std::string required;
        for (size_t i = 0; i < s.order.size(); ++i) {
          const auto& ts = s.types.at(s.order[i]);
          if (ts.size() > 1 && std::find(ts.begin(), ts.end(), "string") != ts.end()) ok = false;
          std::string type = ts.size() == 1 ? "\"" + ts[0] + "\"" : "[";
          if (ts.size() > 1) {
            for (size_t j = 0; j < ts.size(); ++j) type += (j ? ",\"" : "\"") + ts[j] + "\"";
            type += "]";
          }
          schema += (i ? "," : "") + pyjson::dumps(Value::from_string(s.order[i])) +
                    ":{\"type\":" + type + "}";
          if (s.count.at(s.order[i]) == s.calls)
            required +=
                (required.empty() ? "" : ",") + pyjson::dumps(Value::from_string(s.order[i]));
        }
        schema += "},\"required\":[" + required + "],\"additionalProperties\":false}";
        g.tools.push_back({name, parse(schema), true});
      }
      if (ok) out.push_back(std::move(g));
    }
  }
  return out;
}

std::shared_ptr<const CompiledGrammar> compile_tools(const std::vector<DsmlTool>& tools,
                                                     DsmlOptions o,
                                                     std::shared_ptr<const TokenTable> table) {
  auto g = dsml_tool_calls_grammar(tools, o);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? compile_or_die(*g, std::move(table)) : nullptr;
}

TEST(Dsml, EveryGoldenToolCallOutputIsAcceptedByItsStrictGrammar) {
  const auto cases = golden_cases();
  ASSERT_GE(cases.size(), 15u);
  for (const GoldenCase& c : cases) {
    auto g = compile_tools(c.tools, {}, test::byte_tokens());
    ASSERT_NE(g, nullptr) << c.id;
    EXPECT_TRUE(accepts(*g, c.output)) << c.id << ": " << c.output;
    // The V4 tag names do not match V4.1 output.
    DsmlOptions v4;
    v4.v41 = false;
    auto g4 = compile_tools(c.tools, v4, test::byte_tokens());
    EXPECT_FALSE(accepts(*g4, c.output)) << c.id;
  }
  std::printf("%zu golden tool-call outputs accepted\n", cases.size());
}

const char* kLookup =
    R"({"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":9}},"required":["query","limit"],"additionalProperties":false})";

std::string call(const std::string& name, const std::string& params) {
  return "<" + kMarker + " invoke name=\"" + name + "\">\n" + params + "</" + kMarker + " invoke>";
}
std::string param(const std::string& k, bool str, const std::string& v) {
  return "<" + kMarker + " parameter name=\"" + k + "\" string=\"" + (str ? "true" : "false") +
         "\">" + v + "</" + kMarker + " parameter>\n";
}
std::string block(const std::string& calls) {
  return "\n\n<" + kMarker + " calls>\n" + calls + "\n</" + kMarker + " calls>";
}

TEST(Dsml, SchemasAreEnforcedAndOnlyTheMarkerOpensATag) {
  std::vector<DsmlTool> tools{{"lookup", parse(kLookup), true}, {"free", Value(), false}};
  auto g = compile_tools(tools, {}, test::byte_tokens());
  ASSERT_NE(g, nullptr);
  const std::string good =
      call("lookup", param("query", true, "a <b> \"c\"") + param("limit", false, "3"));
  EXPECT_TRUE(accepts(*g, "text first" + block(good)));
  EXPECT_TRUE(accepts(*g, "no call at all"));
  EXPECT_TRUE(accepts(*g, block(good + "\n" + good)));
  EXPECT_TRUE(
      accepts(*g, block(call("free", param("anything", true, "x") + param("n", false, "[1]")))));
  EXPECT_TRUE(accepts(*g, block(call("free", "\n"))));
  // Out of schema: the limit's range, its type, a missing or extra parameter, the order, an
  // unknown tool.
  EXPECT_FALSE(
      accepts(*g, block(call("lookup", param("query", true, "a") + param("limit", false, "10")))));
  EXPECT_FALSE(accepts(
      *g, block(call("lookup", param("query", true, "a") + param("limit", false, "\"3\"")))));
  EXPECT_FALSE(accepts(*g, block(call("lookup", param("query", true, "a")))));
  EXPECT_FALSE(
      accepts(*g, block(call("lookup", param("query", true, "a") + param("limit", false, "3") +
                                           param("x", false, "1")))));
  EXPECT_FALSE(
      accepts(*g, block(call("lookup", param("limit", false, "3") + param("query", true, "a")))));
  EXPECT_FALSE(
      accepts(*g, block(call("other", param("query", true, "a") + param("limit", false, "3")))));
  // The marker written as text is text (no call), and never opens a tag.
  EXPECT_TRUE(accepts(*g, replace_all(block(good), kMarker, kMarkerText)));
  DsmlOptions block_only;
  block_only.text_first = false;
  EXPECT_FALSE(accepts(*compile_tools(tools, block_only, test::byte_tokens()),
                       replace_all(block(good), kMarker, kMarkerText)));
  // No parallel calls: one invoke only. In the block already: no opening, no text.
  DsmlOptions one;
  one.parallel = false;
  EXPECT_FALSE(accepts(*compile_tools(tools, one, test::byte_tokens()), block(good + "\n" + good)));
  DsmlOptions in_block;
  in_block.in_block = true;
  auto gb = compile_tools(tools, in_block, test::byte_tokens());
  EXPECT_TRUE(accepts(*gb, good + "\n</" + kMarker + " calls>"));
  EXPECT_FALSE(accepts(*gb, block(good)));
  EXPECT_FALSE(accepts(*gb, ""));
}

TEST(Dsml, StringEnumsLengthsAndUnsupportedKeywords) {
  auto schema = parse(
      R"({"type":"object","properties":{"unit":{"type":"string","enum":["c","f"]},"note":{"type":"string","maxLength":3},"when":{"type":"string","format":"date"}},"required":["unit"],"additionalProperties":false})");
  std::vector<DsmlTool> tools{{"t", schema, true}};
  auto g = compile_tools(tools, {}, test::byte_tokens());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(*g, block(call("t", param("unit", true, "c") + param("note", true, "abc")))));
  EXPECT_FALSE(accepts(*g, block(call("t", param("unit", true, "k")))));
  EXPECT_FALSE(
      accepts(*g, block(call("t", param("unit", true, "c") + param("note", true, "abcd")))));
  // A string with a format is JSON (string="false"), checked by the JSON Schema grammar.
  EXPECT_TRUE(accepts(
      *g, block(call("t", param("unit", true, "f") + param("when", false, "\"2026-12-03\"")))));
  EXPECT_FALSE(
      accepts(*g, block(call("t", param("unit", true, "f") + param("when", false, "\"soon\"")))));
  // All optional: no parameter is "\n" as the reference renders it.
  auto opt = parse(
      R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false})");
  auto go = compile_tools({{"o", opt, true}}, {}, test::byte_tokens());
  EXPECT_TRUE(accepts(*go, block(call("o", "\n"))));
  EXPECT_TRUE(accepts(*go, block(call("o", param("a", false, "1")))));
  for (const char* bad :
       {R"({"type":"object","patternProperties":{}})",
        R"({"type":"object","properties":{},"additionalProperties":true})", R"({"type":"array"})",
        R"({"type":"object","properties":{"x":{"type":"string","not":{}}},"required":["x"]})"}) {
    auto r = dsml_tool_calls_grammar({{"t", parse(bad), true}}, {});
    EXPECT_FALSE(r.is_ok()) << bad;
  }
}

// Token by token on DeepSeek V4.1's vocabulary: the marker only as its special id.
TEST(Dsml, TokensFollowTheGrammarAndTheMarkerIsOnlyItsId) {
  auto loaded = Tokenizer::load_file(fathom::test::v41_fixture_path());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  const Tokenizer& tok = **loaded;
  const int32_t eos = tok.id_of("<｜end▁of▁sentence｜>");
  const int32_t marker = tok.id_of(kMarkerText);
  ASSERT_GE(marker, 0);
  auto table = TokenTable::create(tok, 129280, {eos}, {marker});
  ASSERT_TRUE(table.is_ok());
  const auto cases = golden_cases();
  ASSERT_FALSE(cases.empty());
  std::vector<uint32_t> mask((*table)->mask_words());
  for (const GoldenCase& c : cases) {
    auto g = compile_tools(c.tools, {}, *table);
    ASSERT_NE(g, nullptr);
    GrammarMatcher m(g);
    // The output as the model emits it: text pieces encoded plainly, the marker as its id.
    const std::string text = replace_all(c.output, kMarker, kMarkerText);
    std::vector<int32_t> ids;
    size_t at = 0;
    for (;;) {
      const size_t p = text.find(kMarkerText, at);
      auto part =
          tok.encode_plain(text.substr(at, p == std::string::npos ? std::string::npos : p - at));
      ASSERT_TRUE(part.is_ok());
      ids.insert(ids.end(), part->begin(), part->end());
      if (p == std::string::npos) break;
      ids.push_back(marker);
      at = p + kMarkerText.size();
    }
    for (int32_t id : ids) {
      m.fill_next_token_bitmask(mask.data());
      ASSERT_TRUE((mask[size_t(id) / 32] >> (id % 32)) & 1) << c.id << " token " << id;
      ASSERT_TRUE(m.accept_token(id)) << c.id;
    }
    EXPECT_TRUE(m.accept_token(eos)) << c.id;
  }
  // The marker's text as ordinary tokens never opens a tag.
  auto g = compile_tools({{"lookup", parse(kLookup), true}}, {}, *table);
  GrammarMatcher m(g);
  auto spoof = tok.encode_plain("\n\n<" + kMarkerText + " calls>");
  ASSERT_TRUE(spoof.is_ok());
  bool all = true;
  for (int32_t id : *spoof) all = all && m.accept_token(id);
  EXPECT_TRUE(all);  // it is text
  EXPECT_TRUE(m.can_terminate());
  m.fill_next_token_bitmask(mask.data());
  // A marker right after text that is not "\n\n<" is refused.
  EXPECT_FALSE((mask[size_t(marker) / 32] >> (marker % 32)) & 1);
}

}  // namespace
}  // namespace fathom::grammar
