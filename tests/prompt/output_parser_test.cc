// OutputParser (ids in, events out) against the official parser on the parse goldens, and
// its safety properties: spoofed markup stays text, any tokenization gives the same result,
// arguments are always valid JSON, stop sequences only in content.
#include "prompt/output_parser.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/py_json.h"
#include "prompt/reference.h"
#include "tokenizer/byte_level.h"
#include "v41_fixture_path.h"

namespace fathom::prompt {
namespace {

using pyjson::Value;

const Tokenizer& fixture() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto r = Tokenizer::load_file(test::v41_fixture_path());
    if (!r.is_ok()) std::abort();
    return std::move(r).value();
  }();
  return *tok;
}

struct Parsed {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  FinishReason finish = FinishReason::kEndOfStream;
  std::string stop;
  bool operator==(const Parsed& o) const {
    return reasoning == o.reasoning && content == o.content && calls == o.calls &&
           finish == o.finish && stop == o.stop;
  }
};

Parsed fold(const std::vector<ParserEvent>& ev) {
  Parsed r;
  for (const auto& e : ev) {
    switch (e.kind) {
      case ParserEvent::Kind::kReasoning:
        r.reasoning += e.text;
        break;
      case ParserEvent::Kind::kContent:
        r.content += e.text;
        break;
      case ParserEvent::Kind::kToolCallBegin:
        r.calls.emplace_back(e.text, "");
        break;
      case ParserEvent::Kind::kToolArguments:
        r.calls.back().second += e.text;
        break;
      case ParserEvent::Kind::kToolCallEnd:
        break;
      case ParserEvent::Kind::kFinish:
        r.finish = e.finish;
        r.stop = e.stop_sequence;
        break;
    }
  }
  return r;
}

Parsed run(const std::vector<int32_t>& ids, OutputParserOptions opt) {
  auto p = OutputParser::create(fixture(), opt);
  EXPECT_TRUE(p.is_ok());
  std::vector<ParserEvent> ev;
  for (int32_t id : ids) EXPECT_TRUE(p->push(id, ev).is_ok());
  p->finish(FinishReason::kEndOfStream, ev);
  return fold(ev);
}

void PrintTo(const Parsed& p, std::ostream* os) {
  *os << "{reasoning=" << ::testing::PrintToString(p.reasoning)
      << " content=" << ::testing::PrintToString(p.content) << " calls=" << p.calls.size();
  for (const auto& c : p.calls) *os << " [" << c.first << " " << c.second << "]";
  *os << " finish=" << int(p.finish) << "}";
}

// The completion as a model emits it: control tokens as ids, text as BPE.
std::vector<int32_t> model_ids(const std::string& completion) {
  return *fixture().encode(completion);
}

// The same, with every text byte as its own byte token: the finest possible split.
std::vector<int32_t> byte_ids(const std::string& completion) {
  std::vector<int32_t> out;
  for (int32_t id : model_ids(completion)) {
    if (fixture().is_added(id)) {
      out.push_back(id);
      continue;
    }
    for (unsigned char b : fixture().token_bytes(id)) {
      out.push_back(fixture().id_of(tok::byte_level::bytes_to_token(std::string(1, char(b)))));
    }
  }
  return out;
}

TEST(OutputParser, AgreesWithTheOfficialParser) {
  size_t compared = 0;
  for (const char* file : {"v4/parse_dev.jsonl", "v41/parse_dev.jsonl"}) {
    std::ifstream in(std::string(FATHOM_TEST_DATA) + "/encoding/" + file);
    std::string line;
    while (std::getline(in, line)) {
      auto c = pyjson::parse(line);
      ASSERT_TRUE(c.is_ok());
      std::string completion = c->find("completion")->text;
      OutputParserOptions opt;
      opt.thinking = c->find("thinking_mode")->text == "thinking";
      Parsed got = run(model_ids(completion), opt);
      EXPECT_EQ(got, run(byte_ids(completion), opt)) << c->find("id")->text;
      for (const auto& [name, args] : got.calls) {
        auto a = pyjson::parse(args);
        EXPECT_TRUE(a.is_ok() && a->is_object())
            << c->find("id")->text << " arguments not JSON: " << args;
      }
      if (c->find("error") != nullptr) continue;  // the official parser rejects it; we stay safe
      const Value& want = *c->find("parsed");
      EXPECT_EQ(got.reasoning, want.find("reasoning_content")->text) << c->find("id")->text;
      EXPECT_EQ(got.content, want.find("content")->text) << c->find("id")->text;
      const auto& calls = want.find("tool_calls")->items;
      ASSERT_EQ(got.calls.size(), calls.size()) << c->find("id")->text;
      for (size_t k = 0; k < calls.size(); ++k) {
        EXPECT_EQ(got.calls[k].first, calls[k].find("function")->find("name")->text);
        auto ref = pyjson::parse(calls[k].find("function")->find("arguments")->text);
        if (ref.is_ok()) {  // the official arguments may be invalid JSON (its quirk)
          EXPECT_EQ(pyjson::dumps(*pyjson::parse(got.calls[k].second)), pyjson::dumps(*ref))
              << c->find("id")->text;
        }
      }
      EXPECT_EQ(got.finish, calls.empty() ? FinishReason::kStop : FinishReason::kToolCalls)
          << c->find("id")->text;
      ++compared;
    }
  }
  EXPECT_GT(compared, 70u);
}

Parsed run_text(const std::string& completion, OutputParserOptions opt, size_t chunk) {
  auto p = OutputParser::create(fixture(), opt);
  EXPECT_TRUE(p.is_ok());
  std::vector<ParserEvent> ev;
  // Chunks of `chunk` bytes, moved to character boundaries (text backends send whole characters).
  for (size_t i = 0; i < completion.size();) {
    size_t j = std::min(completion.size(), i + chunk);
    while (j < completion.size() && (static_cast<unsigned char>(completion[j]) & 0xC0) == 0x80) ++j;
    EXPECT_TRUE(p->push_text(std::string_view(completion).substr(i, j - i), ev).is_ok());
    i = j;
  }
  p->finish(FinishReason::kEndOfStream, ev);
  return fold(ev);
}

TEST(OutputParser, TextChunkModeMatchesIdModeOnTheGoldens) {
  size_t n = 0;
  for (const char* file : {"v4/parse_dev.jsonl", "v41/parse_dev.jsonl"}) {
    std::ifstream in(std::string(FATHOM_TEST_DATA) + "/encoding/" + file);
    std::string line;
    while (std::getline(in, line)) {
      auto c = pyjson::parse(line);
      std::string completion = c->find("completion")->text;
      OutputParserOptions opt;
      opt.thinking = c->find("thinking_mode")->text == "thinking";
      Parsed ids = run(model_ids(completion), opt);
      for (size_t chunk : {size_t(1), size_t(3), size_t(64)}) {
        EXPECT_EQ(run_text(completion, opt, chunk), ids)
            << c->find("id")->text << " chunk " << chunk;
      }
      ++n;
    }
  }
  EXPECT_EQ(n, 120u);
  // The documented weakness: spelled markup is taken as markup in text mode.
  Parsed spoofed = run_text("I wrote </think> here", {.thinking = true}, 4);
  EXPECT_EQ(spoofed.reasoning, "I wrote ");
}

TEST(OutputParser, SpelledThinkEndStaysInReasoning) {
  std::vector<int32_t> ids = *fixture().encode_plain("I wrote </think> here");
  ids.push_back(fixture().id_of("</think>"));
  auto answer = *fixture().encode_plain("answer");
  ids.insert(ids.end(), answer.begin(), answer.end());
  ids.push_back(fixture().id_of("<｜end▁of▁sentence｜>"));
  Parsed p = run(ids, {.thinking = true});
  EXPECT_EQ(p.reasoning, "I wrote </think> here");
  EXPECT_EQ(p.content, "answer");
  EXPECT_EQ(p.finish, FinishReason::kStop);
}

TEST(OutputParser, SpelledMarkupIsContentAndRealMarkupIsACall) {
  const std::string call =
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get\">\n<｜DSML｜ parameter name=\"city\" "
      "string=\"true\">Paris \"</｜DSML｜ parameter>\" 日本</｜DSML｜ parameter>\n<｜DSML｜ "
      "parameter "
      "name=\"n\" string=\"false\">2</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"bad\" "
      "string=\"false\">not json</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ "
      "calls><｜end▁of▁sentence｜>";
  // The parameter value spells the closing tag with ordinary tokens: it must stay in the value.
  std::string spelled_close = "Paris \"</｜DSML｜ parameter>\" 日本";
  std::vector<int32_t> ids = model_ids("Sure." + call);
  // Re-encode the value's spelled tag as plain text (a model writing it in text).
  std::vector<int32_t> fixed;
  {
    std::string before =
        "Sure.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get\">\n<｜DSML｜ parameter "
        "name=\"city\" string=\"true\">";
    fixed = model_ids(before);
    auto v = *fixture().encode_plain(spelled_close);
    fixed.insert(fixed.end(), v.begin(), v.end());
    auto rest =
        model_ids(call.substr(call.find("</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"n\"")));
    fixed.insert(fixed.end(), rest.begin(), rest.end());
  }
  Parsed p = run(fixed, {});
  EXPECT_EQ(p.content, "Sure.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].first, "get");
  EXPECT_EQ(
      p.calls[0].second,
      "{\"city\": \"Paris \\\"</｜DSML｜ parameter>\\\" 日本\", \"n\": 2, \"bad\": \"not json\"}");
  EXPECT_EQ(p.finish, FinishReason::kToolCalls);
}

TEST(OutputParser, EveryTokenizationGivesTheSameCalls) {
  const std::string completion =
      "reasoning\n</think>text\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a "
      "b\">\n<｜DSML｜parameter "
      "name=\"shipping address\" "
      "string=\"true\">Paris\n日本</｜DSML｜parameter>\n<｜DSML｜parameter "
      "name=\" string= mode \" "
      "string=\"false\">{\"enabled\":true}</｜DSML｜parameter>\n<｜DSML｜parameter "
      "name=\"\" string=\"true\">empty key</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke "
      "name=\"none\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>";
  Parsed a = run(model_ids(completion), {.thinking = true});
  Parsed b = run(byte_ids(completion), {.thinking = true});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.reasoning, "reasoning\n");
  EXPECT_EQ(a.content, "text");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].second,
            "{\"shipping address\": \"Paris\\n日本\", \" string= mode \": {\"enabled\":true}, "
            "\"\": \"empty key\"}");
  EXPECT_EQ(a.calls[1].first, "none");
  EXPECT_EQ(a.calls[1].second, "{}");
}

TEST(OutputParser, StopSequencesOnlyInContentAndHeldBackMinimally) {
  std::vector<int32_t> ids = *fixture().encode_plain("think STOP more");
  ids.push_back(fixture().id_of("</think>"));
  auto c = *fixture().encode_plain("Hello ST");
  ids.insert(ids.end(), c.begin(), c.end());
  auto c2 = *fixture().encode_plain("OP world");
  ids.insert(ids.end(), c2.begin(), c2.end());
  Parsed p = run(ids, {.thinking = true, .stop_sequences = {"STOP", ""}});
  EXPECT_EQ(p.reasoning, "think STOP more");
  EXPECT_EQ(p.content, "Hello ");
  EXPECT_EQ(p.finish, FinishReason::kStopSequence);
  EXPECT_EQ(p.stop, "STOP");
  // A partial match that does not complete is released.
  Parsed q = run(*fixture().encode_plain("a ST b"), {.stop_sequences = {"STOP"}});
  EXPECT_EQ(q.content, "a ST b");
}

TEST(OutputParser, UnclosedMarkupStillGivesValidJson) {
  Parsed p = run(model_ids("x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ "
                           "parameter name=\"q\" string=\"true\">abc"),
                 {});
  EXPECT_EQ(p.content, "x");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].second, "{\"q\": \"abc\"}");
  Parsed q = run(model_ids("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ "
                           "parameter name=\"q\" string=\"false\">[1, 2"),
                 {});
  EXPECT_EQ(q.calls[0].second, "{\"q\": \"[1, 2\"}");
  // With tool calls off the markup is dropped, never shown as content.
  Parsed r = run(model_ids("ok\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ "
                           "invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>"),
                 {.parse_tool_calls = false});
  EXPECT_EQ(r.content, "ok");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.finish, FinishReason::kStop);
}

}  // namespace
}  // namespace fathom::prompt
