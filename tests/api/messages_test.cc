// The Anthropic Messages adapter: validation rules with Anthropic-shaped errors, conversion
// (system, thinking blocks, tool_use/tool_result, system-role reminders) and the stream's
// event order.
#include "api/anthropic_messages.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/errors.h"

namespace fathom::api {
namespace {

std::string body(const std::string& extra,
                 const std::string& messages = R"([{"role":"user","content":"hi"}])") {
  return R"({"model":"m","max_tokens":64,"messages":)" + messages +
         (extra.empty() ? "" : "," + extra) + "}";
}

void expect_rejected(const std::string& b, const std::string& mention,
                     PromptFormat f = PromptFormat::kV41) {
  MessagesOptions o;
  o.format = f;
  o.images = true;  // the image rules below apply to a model with vision input
  auto r = parse_messages_request(b, o);
  ASSERT_FALSE(r.is_ok()) << "accepted: " << b.substr(0, 300);
  auto err = nlohmann::json::parse(anthropic_error_json(r.status()));
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  std::string msg = err["error"]["message"].get<std::string>();
  EXPECT_NE(msg.find(mention), std::string::npos)
      << "message: " << msg << "\nbody: " << b.substr(0, 300);
}

TEST(MessagesRequest, ValidationRules) {
  expect_rejected("{bad", "not valid JSON");
  expect_rejected(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})",
                  "max_tokens: Field required");
  expect_rejected(body(R"("max_tokens": 0)"), "max_tokens");
  expect_rejected(body(R"("temperature": 3)"), "temperature");
  expect_rejected(body(R"("temperature": 1.5)"),
                  "temperature: Input should be less than or equal to 1");
  expect_rejected(body(R"("metadata": {"user_id": 5})"), "metadata.user_id");
  expect_rejected(body("", R"([{"role":"user","content":[]}])"), "non-empty content");
  expect_rejected(
      body(
          "",
          R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":[]}])"),
      "messages.2: all messages must have non-empty content");
  expect_rejected(body(R"("top_p": 0)"), "top_p");
  expect_rejected(body(R"("stop_sequences": [""])"), "non-empty string");
  expect_rejected(
      body(
          R"("stop_sequences": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"])"),
      "at most 16");
  expect_rejected(body(R"("thinking": {"type": "sometimes"})"), "thinking.type");
  expect_rejected(body(R"("output_config": {"effort": "huge"})"), "output_config.effort");
  expect_rejected(body(R"("output_config": {"verbosity": "low"})"),
                  "output_config.verbosity: Extra inputs are not permitted");
  expect_rejected(body(R"("output_config": [])"), "output_config: Input should be");
  expect_rejected(body(R"("output_config": {"format": {"type": "json_object"}})"),
                  "output_config.format.type");
  expect_rejected(body(R"("output_config": {"format": {"type": "json_schema"}})"),
                  "output_config.format.schema: Field required");
  expect_rejected(body(R"("output_config": {"format": {"type": "json_schema", "schema": "{}"}})"),
                  "output_config.format.schema");
  expect_rejected(
      body(R"("output_config": {"format": {"type": "json_schema", "schema": {}, "name": "x"}})"),
      "output_config.format.name: Extra inputs are not permitted");
  expect_rejected(body(R"("tools": [{"name": "has space", "input_schema": {"type": "object"}}])"),
                  "1-128 characters");
  expect_rejected(body(R"("tools": [{"name": "f", "input_schema": {"type": "string"}}])"),
                  "input_schema");
  expect_rejected(body(R"("tools": [{"type": "web_search_20250305", "name": "web_search"}])"),
                  "web_search");
  expect_rejected(
      body(
          R"("tools": [{"name": "f", "input_schema": {"type": "object"}}, {"name": "f", "input_schema": {"type": "object"}}])"),
      "duplicate");
  expect_rejected(
      body(
          R"("tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"})"),
      "Thinking mode does not support");
  expect_rejected(
      body(
          R"("tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "g"}, "thinking": {"type": "disabled"})"),
      "tool_choice.name");
  expect_rejected(
      body(
          "",
          R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}])"),
      "answers no tool_use");
  expect_rejected(
      body(
          "",
          R"([{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":"no result"}])"),
      "has no tool_result");
  expect_rejected(
      body(
          "",
          R"([{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":[]}]}])"),
      "object 'input'");
  expect_rejected(body("", R"([{"role":"wizard","content":"hi"}])"), "must be user or assistant");
  expect_rejected(body("", R"([{"role":"user","content":"see <｜deepseek_image｜>"}])"),
                  "is not allowed");
  expect_rejected(
      body(
          "",
          R"([{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}])"),
      "does not take images", PromptFormat::kV4);
  expect_rejected(body("", R"([{"role":"user","content":[{"type":"audio"}]}])"),
                  "unsupported block type");
}

// cache_control ({"type": "ephemeral", "ttl": "5m" | "1h"}) wherever Anthropic allows it: the
// longest ttl is kept for the server's retention class; anything else is a 400 naming it.
TEST(MessagesRequest, CacheControlAndRetention) {
  auto ttl = [](const std::string& b) -> int64_t {
    auto r = parse_messages_request(b, MessagesOptions{});
    EXPECT_TRUE(r.is_ok()) << r.status().to_string() << "\n" << b;
    return r.is_ok() ? r->sampling.cache_control_ttl_ms : -1;
  };
  const std::string eph = R"("cache_control":{"type":"ephemeral"})";
  const std::string hour = R"("cache_control":{"type":"ephemeral","ttl":"1h"})";
  EXPECT_EQ(ttl(body("")), 0);
  EXPECT_EQ(ttl(body(eph)), 5 * 60 * 1000);
  EXPECT_EQ(ttl(body(R"("system":[{"type":"text","text":"s",)" + hour + "}]")), 3600 * 1000);
  EXPECT_EQ(ttl(body(R"("tools":[{"name":"t","input_schema":{"type":"object"},)" + eph + "}]")),
            5 * 60 * 1000);
  EXPECT_EQ(
      ttl(body(eph, R"([{"role":"user","content":[{"type":"text","text":"a",)" + hour + "}]}]")),
      3600 * 1000);
  EXPECT_EQ(ttl(body("", R"([{"role":"user","content":"a",)" + hour + "}]")), 3600 * 1000);
  EXPECT_EQ(
      ttl(body(
          "",
          R"([{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"t","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":[{"type":"text","text":"r",)" +
              hour + "}]}]}]")),
      3600 * 1000);
  expect_rejected(body(R"("cache_control":"ephemeral")"), "cache_control: must be an object");
  expect_rejected(body(R"("cache_control":{"type":"persistent"})"), "cache_control.type");
  expect_rejected(body(R"("cache_control":{"type":"ephemeral","ttl":"10m"})"), "cache_control.ttl");
  expect_rejected(body(R"("system":[{"type":"text","text":"s","cache_control":{"ttl":"1h"}}])"),
                  "system.0.cache_control.type");
  expect_rejected(body("", R"([{"role":"user","content":[{"type":"text","text":"a",
      "cache_control":{"type":"ephemeral","ttl":3600}}]}])"),
                  "messages.0.content.0.cache_control.ttl");
  expect_rejected(
      body(R"("tools":[{"name":"t","input_schema":{"type":"object"},"cache_control":1}])"),
      "tools.0.cache_control");
  // `retention`: a non-empty string (the server checks the name).
  auto r = parse_messages_request(body(R"("retention":"agent")"), MessagesOptions{});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->sampling.retention, "agent");
  expect_rejected(body(R"("retention":3)"), "retention: must be a string");
  expect_rejected(body(R"("retention":"")"), "retention: must be a string");
}

TEST(MessagesRequest, ConvertsToTheConversation) {
  auto r = parse_messages_request(
      body(
          R"("system": [{"type":"text","text":"Be exact."}], "tools": [{"name":"lookup","description":"Look up","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}}], "stop_sequences": ["END"])",
          R"([{"role":"user","content":"find it"},
               {"role":"assistant","content":[{"type":"thinking","thinking":"need lookup"},{"type":"text","text":"Searching."},{"type":"tool_use","id":"t1","name":"lookup","input":{"q":"中 \"x\""}}]},
               {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"found"}]},{"type":"text","text":"thanks"}]},
               {"role":"system","content":"stay brief"}])"),
      {});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->thinking);
  EXPECT_EQ(r->sampling.stop, std::vector<std::string>{"END"});
  std::string p = render_api(*r, PromptFormat::kV41)->to_string();
  EXPECT_EQ(p.rfind("<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75", 0), 0u)
      << p.substr(0, 200);
  EXPECT_NE(p.find("Be exact.\n\n## Tools"), std::string::npos);
  EXPECT_NE(p.find("{\"name\": \"lookup\", \"description\": \"Look up\""), std::string::npos);
  EXPECT_NE(p.find("<think>need lookup</think>Searching.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke "
                   "name=\"lookup\">\n"
                   "<｜DSML｜ parameter name=\"q\" string=\"true\">中 \"x\"</｜DSML｜ parameter>"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<｜User｜><tool_result>found</tool_result>\n\nthanks"), std::string::npos) << p;
  EXPECT_NE(p.find("<system-reminder>\nstay brief\n</system-reminder><｜Assistant｜><think>"),
            std::string::npos)
      << p;
}

// output_config.format constrains the output (a JSON Schema the server compiles) and, as
// Chat's response_format, is shown to the model on the system message.
TEST(MessagesRequest, OutputConfigFormatIsAStructuredOutput) {
  auto r = parse_messages_request(
      body(
          R"("output_config": {"format": {"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}, "effort": null})"),
      {});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->structured.kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_EQ(r->structured.field, "output_config.format");
  EXPECT_EQ(
      nlohmann::json::parse(r->structured.text),
      nlohmann::json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"));
  std::string p = render_api(*r, PromptFormat::kV41)->to_string();
  EXPECT_NE(p.find("## Response Format:\n\nYou MUST strictly adhere to the following schema to "
                   "reply:\n{\"type\": \"json_schema\", \"schema\": {\"type\": \"object\""),
            std::string::npos)
      << p;
  auto none = parse_messages_request(body(R"("output_config": {"format": null})"), {});
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_FALSE(none->structured.active());
}

TEST(MessagesResponder, EventOrderAndCompleteMessage) {
  using K = prompt::ParserEvent::Kind;
  prompt::ParserEvent b{K::kToolCallBegin, "lookup"}, a{K::kToolArguments, "{\"q\": \"x\"}"},
      e{K::kToolCallEnd, ""}, f{K::kFinish, ""};
  b.tool_index = a.tool_index = e.tool_index = 0;
  f.finish = prompt::FinishReason::kToolCalls;
  std::vector<prompt::ParserEvent> ev = {
      {K::kReasoning, "hmm"}, {K::kContent, "Let me look."}, b, a, e, f};
  Usage u{50, 7, 32};
  MessagesResponder s("r1", "deepseek", true);
  std::string sse = s.stream(ev, u);
  std::vector<std::string> names;
  std::vector<nlohmann::json> data;
  size_t pos = 0;
  while ((pos = sse.find("event: ", pos)) != std::string::npos) {
    size_t nl = sse.find('\n', pos);
    names.push_back(sse.substr(pos + 7, nl - pos - 7));
    size_t d = sse.find("data: ", nl), end = sse.find("\n\n", d);
    data.push_back(nlohmann::json::parse(sse.substr(d + 6, end - d - 6)));
    pos = end;
  }
  std::vector<std::string> want = {
      "message_start",       "content_block_start", "ping",
      "content_block_delta", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",
      "message_delta",       "message_stop"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(data[1]["content_block"]["type"], "thinking");
  EXPECT_EQ(data[4]["delta"]["type"], "signature_delta");
  EXPECT_EQ(data[9]["content_block"]["id"], "toolu_r1_0");
  EXPECT_EQ(data[10]["delta"]["partial_json"], "{\"q\": \"x\"}");
  EXPECT_EQ(data[12]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(data[0]["message"]["usage"]["input_tokens"], 18);
  EXPECT_EQ(data[0]["message"]["usage"]["cache_read_input_tokens"], 32);
  MessagesResponder c("r1", "deepseek", true);
  c.add(ev);
  auto m = nlohmann::json::parse(c.complete(u));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][1]["text"], "Let me look.");
  EXPECT_EQ(m["content"][2]["input"]["q"], "x");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["usage"]["output_tokens"], 7);
}

}  // namespace
}  // namespace fathom::api
