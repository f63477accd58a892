// The Chat Completions adapter: every validation rule rejects its bad request with an
// OpenAI-shaped error body; the API-mode prompt follows deepseek-recipe's rules (the spec's
// worked example byte for byte); output events become chunks and a complete response.
#include "api/chat_completions.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/errors.h"

namespace fathom::api {
namespace {

std::string with(const std::string& extra,
                 const std::string& messages = R"([{"role":"user","content":"hi"}])") {
  return R"({"model":"m","messages":)" + messages + (extra.empty() ? "" : "," + extra) + "}";
}

void expect_rejected(const std::string& body, const std::string& mention,
                     PromptFormat f = PromptFormat::kV41) {
  ChatOptions o;
  o.format = f;
  o.images = true;  // the image rules below apply to a model with vision input
  auto r = parse_chat_request(body, o);
  ASSERT_FALSE(r.is_ok()) << "accepted: " << body.substr(0, 300);
  EXPECT_EQ(http_status_of(r.status()), 400);
  auto err = nlohmann::json::parse(openai_error_json(r.status()));
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  std::string msg = err["error"]["message"].get<std::string>();
  EXPECT_NE(msg.find(mention), std::string::npos)
      << "message: " << msg << "\nbody: " << body.substr(0, 300);
}

TEST(ChatRequest, BodyErrors) {
  expect_rejected("{not json", "not valid JSON");
  expect_rejected("[1,2]", "must be a JSON object");
  expect_rejected("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}",
                  "not valid JSON");
  expect_rejected(with(R"("temperature": NaN)"), "not valid JSON");
  expect_rejected(R"({"model":"m"})", "'messages'");
  expect_rejected(with("", "[]"), "'messages'");
  ChatOptions small;
  small.max_body_bytes = 10;
  EXPECT_FALSE(parse_chat_request(with(""), small).is_ok());
}

TEST(ChatRequest, SamplingRules) {
  expect_rejected(with(R"("temperature": 2.5)"), "'temperature' must be in [0, 2]");
  expect_rejected(with(R"("temperature": -0.1)"), "'temperature'");
  expect_rejected(with(R"("top_p": 0)"), "'top_p' must be in (0, 1]");
  expect_rejected(with(R"("top_p": 1.5)"), "'top_p'");
  expect_rejected(with(R"("max_tokens": 0)"), "'max_tokens' must be positive");
  expect_rejected(with(R"("max_completion_tokens": -5)"), "'max_completion_tokens'");
  expect_rejected(with(R"("n": 0)"), "'n' must be in [1, 128]");
  expect_rejected(with(R"("n": 129)"), "'n' must be in [1, 128]");
  expect_rejected(with(R"("presence_penalty": 2.5)"), "'presence_penalty' must be in [-2, 2]");
  expect_rejected(with(R"("frequency_penalty": -3)"), "'frequency_penalty'");
  expect_rejected(with(R"("seed": 9223372036854775808)"), "'seed' is out of range");
  expect_rejected(
      with(
          R"("stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"])"),
      "at most 16");
  expect_rejected(with(R"("stop": [1])"), "'stop'");
  expect_rejected(with(R"("stream_options": {"include_usage": true})"),
                  "only allowed with stream=true");
  expect_rejected(with(R"("reasoning_effort": "extreme")"), "'reasoning_effort'");
  expect_rejected(with(R"("thinking": {"type": "maybe"})"), "'thinking.type'");
  // Fathom's `retention` (the KV store's class; the server checks the name).
  expect_rejected(with(R"("retention": 3)"), "'retention' must be a string");
  expect_rejected(with(R"("retention": ["chat"])"), "'retention'");
  expect_rejected(with(R"("retention": "")"), "'retention'");
  auto r = parse_chat_request(with(R"("retention": "agent")"), ChatOptions{});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->sampling.retention, "agent");
}

TEST(ChatRequest, ToolRules) {
  const std::string tool =
      R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{}}}})";
  expect_rejected(with(R"("tools": [{"type":"function","function":{"name":"bad name!"}}])"),
                  "1-128 characters");
  expect_rejected(with(R"("tools": [{"type":"function","function":{"name":")" +
                       std::string(129, 'a') + "\"}}]"),
                  "1-128 characters");
  expect_rejected(with(R"("tools": [)" + tool + "," + tool + "]"), "duplicate tool name");
  expect_rejected(
      with(
          R"("tools": [{"type":"function","function":{"name":"f","parameters":{"type":"array"}}}])"),
      "\"type\": \"object\"");
  expect_rejected(with(R"("tools": [{"type":"retrieval"}])"), "only {\"type\": \"function\"");
  expect_rejected(with(R"("tools": [)" + tool + R"(], "tool_choice": "required")"),
                  "Thinking mode does not support this tool_choice");
  expect_rejected(
      with(
          R"("tools": [)" + tool +
          R"(], "tool_choice": {"type":"function","function":{"name":"nope"}}, "thinking": {"type":"disabled"})"),
      "unknown tool");
  expect_rejected(with(R"("tool_choice": "required", "thinking": {"type":"disabled"})"),
                  "requires 'tools'");
  expect_rejected(with(R"("tool_choice": "sometimes")"), "'tool_choice'");
}

TEST(ChatRequest, MessageRules) {
  expect_rejected(with("", R"([{"role":"user","content":"hi"},{"role":"assistant"}])"),
                  "needs 'content' or 'tool_calls'");
  expect_rejected(
      with(
          "",
          R"([{"role":"user","content":"hi"},{"role":"assistant","content":"x","tool_calls":[]}])"),
      "non-empty list");
  const std::string call =
      R"({"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]})";
  expect_rejected(with("", R"([{"role":"user","content":"hi"},)" + call +
                               R"(,{"role":"user","content":"next"}])"),
                  "has no tool message");
  expect_rejected(with("", R"([{"role":"user","content":"hi"},)" + call + "]"),
                  "has no tool message");
  expect_rejected(
      with(
          "",
          R"([{"role":"user","content":"hi"},)" + call +
              R"(,{"role":"tool","tool_call_id":"c1","content":"a"},{"role":"tool","tool_call_id":"c1","content":"b"}])"),
      "duplicate tool message");
  expect_rejected(
      with("",
           R"([{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"zz","content":"a"}])"),
      "no assistant tool call has id");
  expect_rejected(
      with(
          "",
          R"([{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}])"),
      "duplicate tool call id");
  expect_rejected(with("", R"([{"role":"wizard","content":"hi"}])"), "unsupported role");
  expect_rejected(with("", R"([{"content":"hi"}])"), "'role' is required");
  expect_rejected(with("", R"([{"role":"user","content":"look <｜image｜> here"}])"),
                  "is not allowed");
  expect_rejected(with("", R"([{"role":"user","content":"look <｜deepseek_image｜> here"}])"),
                  "is not allowed");
  expect_rejected(
      with("", R"([{"role":"user","content":[{"type":"file","file":{"file_id":"f-1"}}]}])"),
      "'file_id' is not supported");
  expect_rejected(
      with("", R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/)" +
                   std::string(9000, 'a') + "\"}}]}]"),
      "8192 bytes");
  expect_rejected(
      with("",
           R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x"}}]}])"),
      "data URL");
  expect_rejected(
      with(
          "",
          R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}])"),
      "does not take images", PromptFormat::kV4);
  expect_rejected(with("", R"([{"role":"user","content":[{"type":"audio"}]}])"),
                  "unsupported content part");
  expect_rejected(with("", R"([{"role":"user","content":null}])"), "needs 'content'");
  expect_rejected(
      with(R"("response_format": {"type": "json_object"})", R"([{"role":"user","content":"hi"}])"),
      "the word \"json\"");
  expect_rejected(with(R"("response_format": {"type": "regex"})"), "'response_format.type'");
  expect_rejected(
      with("",
           R"([{"role":"user","content":"hi"},{"role":"assistant","content":"a","prefix":true}])"),
      "'prefix'");
}

TEST(ChatRequest, RecipeRenderingOfTheSpecExample) {
  // shared/spec/prompt-format.md §7.2's recipe-compatible V4.1 rendering.
  auto req = parse_chat_request(
      R"({"messages":[{"role":"user","content":"first"},{"role":"user","content":"second"},
          {"role":"assistant","content":"answer","reasoning_content":"prior reasoning"},
          {"role":"system","content":"new instruction"}],"reasoning_effort":"minimal"})",
      {});
  ASSERT_TRUE(req.is_ok()) << req.status().to_string();
  auto p = render_api(*req, PromptFormat::kV41);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->to_string(),
            "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 50 (range 1-100, the higher the "
            "value, the more thorough "
            "the reasoning)\n\n<｜User｜>first\n\nsecond<｜Assistant｜><think>prior "
            "reasoning</think>answer"
            "<｜end▁of▁sentence｜><｜System｜>new instruction<｜Assistant｜><think>");
}

TEST(ChatRequest, RequiredToolChoiceOpensTheBlockAndJsonModeAddsTheFormat) {
  auto req = parse_chat_request(
      R"({"messages":[{"role":"user","content":"weather? reply in json"}],"thinking":{"type":"disabled"},
          "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
          "tool_choice":{"type":"function","function":{"name":"get_weather"}},"response_format":{"type":"json_object"},"stop":["", "END"]})",
      {});
  ASSERT_TRUE(req.is_ok()) << req.status().to_string();
  EXPECT_EQ(req->tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(req->thinking);
  EXPECT_EQ(req->sampling.stop, std::vector<std::string>{"END"});
  auto opts = req->parsing_options();
  EXPECT_TRUE(opts.start_in_tool_block);
  std::string s = render_api(*req, PromptFormat::kV41)->to_string();
  EXPECT_EQ(
      s.substr(s.size() - std::string("<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n").size()),
      "<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n");
  EXPECT_NE(s.find("## Response Format:\n\nYou MUST strictly adhere to the following schema to "
                   "reply:\n{\"type\": \"json_object\"}"),
            std::string::npos);
  EXPECT_NE(s.find("{\"name\": \"get_weather\""), std::string::npos);
  // tool_choice none leaves the tools out.
  auto none = parse_chat_request(
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"})",
      {});
  EXPECT_EQ(render_api(*none, PromptFormat::kV41)->to_string().find("## Tools"), std::string::npos);
}

TEST(ChatResponder, StreamAndCompleteResponses) {
  using K = prompt::ParserEvent::Kind;
  std::vector<prompt::ParserEvent> ev = {
      {K::kReasoning, "think"}, {K::kContent, "Hel"}, {K::kContent, "lo"}};
  prompt::ParserEvent b{K::kToolCallBegin, "get"};
  b.tool_index = 0;
  prompt::ParserEvent a1{K::kToolArguments, "{\"q\": "}, a2{K::kToolArguments, "1}"},
      end{K::kToolCallEnd, ""};
  a1.tool_index = a2.tool_index = end.tool_index = 0;
  prompt::ParserEvent fin{K::kFinish, ""};
  fin.finish = prompt::FinishReason::kToolCalls;
  ev.insert(ev.end(), {b, a1, a2, end, fin});
  Usage u{100, 9, 64};
  ChatResponder s("abc", "deepseek", 1700000000, true, true);
  std::string sse = s.stream(ev, u);
  std::vector<nlohmann::json> chunks;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t e = sse.find("\n\n", pos);
    std::string payload = sse.substr(pos + 6, e - pos - 6);
    pos = e;
    if (payload == "[DONE]") break;
    chunks.push_back(nlohmann::json::parse(payload));
  }
  ASSERT_GE(chunks.size(), 6u);
  EXPECT_EQ(sse.substr(sse.size() - 14), "data: [DONE]\n\n");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(chunks[0]["choices"][0]["delta"]["content"].is_null());
  std::string content, args;
  for (const auto& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) continue;
    const auto& d = c["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) content += d["content"];
    if (d.contains("tool_calls"))
      args += d["tool_calls"][0]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(content, "Hello");
  EXPECT_EQ(nlohmann::json::parse(args), nlohmann::json::parse("{\"q\": 1}"));
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(chunks.back()["usage"]["prompt_tokens_details"]["cached_tokens"], 64);
  ChatResponder c("abc", "deepseek", 1700000000, true, true);
  c.add(ev);
  auto full = nlohmann::json::parse(c.complete(u));
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(full["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(full["choices"][0]["message"]["reasoning_content"], "think");
  EXPECT_EQ(full["choices"][0]["message"]["tool_calls"][0]["id"], "call_abc_0");
  EXPECT_EQ(full["usage"]["total_tokens"], 109);
  EXPECT_EQ(full["usage"]["prompt_cache_miss_tokens"], 36);
}

}  // namespace
}  // namespace fathom::api

namespace fathom::api {
namespace {

TEST(EffortTables, PerCheckpointAsPublished) {
  // prompt-format.md §4.2 (and the recipe mappings for an unset effort).
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41Release, Effort::kLow), 50);
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41Release, Effort::kHigh), 75);
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41Release, Effort::kXhigh), 75);
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41Release, Effort::kMax), 100);
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41Release, std::nullopt), 75);
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41PreRelease, Effort::kLow), 25);
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41PreRelease, Effort::kHigh), 50);
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41PreRelease, Effort::kXhigh), 75);
  EXPECT_EQ(v41_effort_budget(Checkpoint::kV41PreRelease, Effort::kMax), 100);
  EXPECT_EQ(v4_effort_prefix(Checkpoint::kV4Preview, Effort::kHigh), "");
  EXPECT_EQ(v4_effort_prefix(Checkpoint::kV4Preview, Effort::kMax)
                .rfind("Reasoning Effort: Absolute maximum", 0),
            0u);
  EXPECT_EQ(v4_effort_prefix(Checkpoint::kV4_0731, Effort::kLow), "");
  EXPECT_EQ(v4_effort_prefix(Checkpoint::kV4_0731, Effort::kHigh)
                .rfind("Reasoning Effort: Absolute maximum", 0),
            0u);
  EXPECT_EQ(v4_effort_prefix(Checkpoint::kV4_0731, Effort::kMax)
                .rfind("Reasoning Effort: Beyond maximum \u2014 exhaustive", 0),
            0u);
  std::string beyond = v4_effort_prefix(Checkpoint::kV4_0731, Effort::kMax);
  EXPECT_EQ(beyond.substr(beyond.size() - 2), "\n\n");
  // The prefix lands right after BOS, in thinking mode only.
  auto req = parse_chat_request(
      R"({"messages":[{"role":"user","content":"q"}],"reasoning_effort":"max"})", {});
  ASSERT_TRUE(req.is_ok());
  std::string v4 = render_api(*req, PromptFormat::kV4, Checkpoint::kV4_0731)->to_string();
  EXPECT_EQ(v4.rfind("<｜begin▁of▁sentence｜>Reasoning Effort: Beyond maximum", 0), 0u) << v4;
  // An integer budget (Fathom extension) reaches the V4.1 prompt as is.
  auto b = parse_chat_request(
      R"({"messages":[{"role":"user","content":"q"}],"reasoning_effort":33})", {});
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_NE(render_api(*b, PromptFormat::kV41)->to_string().find("Reasoning Effort: 33 (range"),
            std::string::npos);
  EXPECT_FALSE(parse_chat_request(
                   R"({"messages":[{"role":"user","content":"q"}],"reasoning_effort":101})", {})
                   .is_ok());
}

}  // namespace
}  // namespace fathom::api
