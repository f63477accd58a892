// Chat Completions parameters beyond deepseek-recipe: n, logprobs/top_logprobs in OpenAI's
// shape, thinking budgets, and every field that is not implemented being a 400 that names it
// (never silently dropped) while fields with no effect on the output are accepted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/chat_completions.h"
#include "api/errors.h"

namespace fathom::api {
namespace {

using nlohmann::json;
using K = prompt::ParserEvent::Kind;

std::string req(const std::string& extra,
                const std::string& messages = R"([{"role":"user","content":"hi"}])") {
  return R"({"model":"m","messages":)" + messages + (extra.empty() ? "" : "," + extra) + "}";
}

// The OpenAI error body of a rejected request (and that it is a 400).
json rejected(const std::string& body, const ChatOptions& o = {}) {
  auto r = parse_chat_request(body, o);
  EXPECT_FALSE(r.is_ok()) << "accepted: " << body;
  if (r.is_ok()) return json::object();
  EXPECT_EQ(http_status_of(r.status()), 400) << r.status().message();
  return json::parse(openai_error_json(r.status()))["error"];
}

std::vector<json> data_frames(const std::string& sse, bool* done = nullptr) {
  std::vector<json> out;
  if (done) *done = false;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t e = sse.find("\n\n", pos);
    std::string payload = sse.substr(pos + 6, e - pos - 6);
    pos = e;
    if (payload == "[DONE]") {
      if (done) *done = true;
      continue;
    }
    out.push_back(json::parse(payload));
  }
  return out;
}

TEST(ChatParams, NLogprobsAndTopLogprobsAreParsed) {
  auto r = parse_chat_request(req(R"("n":3,"logprobs":true,"top_logprobs":5)"), {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->n, 3);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 5);
  auto plain = parse_chat_request(req(""), {});
  EXPECT_EQ(plain->n, 1);
  EXPECT_FALSE(plain->logprobs);
  EXPECT_EQ(rejected(req(R"("top_logprobs":2)"))["param"], "top_logprobs");
  EXPECT_EQ(rejected(req(R"("logprobs":true,"top_logprobs":21)"))["param"], "top_logprobs");
  EXPECT_EQ(rejected(req(R"("logprobs":"yes")"))["param"], "logprobs");
  EXPECT_EQ(rejected(req(R"("n":1.5)"))["param"], "n");
  auto streamed = parse_chat_request(req(R"("n":2,"stream":true)"), {});
  EXPECT_TRUE(streamed.is_ok());
}

TEST(ChatParams, ThinkingBudgetFollowsAnthropicsRules) {
  auto r = parse_chat_request(
      req(R"("max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":2048})"), {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->reasoning_budget, 2048);
  EXPECT_TRUE(r->thinking);
  EXPECT_EQ(parse_chat_request(req(""), {})->reasoning_budget, -1);
  EXPECT_EQ(rejected(req(R"("thinking":{"type":"enabled","budget_tokens":1023})"))["param"],
            "thinking.budget_tokens");
  EXPECT_EQ(
      rejected(
          req(R"("max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":2000})"))["param"],
      "thinking.budget_tokens");
  EXPECT_EQ(rejected(req(R"("thinking":{"type":"disabled","budget_tokens":2000})"))["param"],
            "thinking.budget_tokens");
  auto kw = parse_chat_request(req(R"("chat_template_kwargs":{"thinking":false})"), {});
  ASSERT_TRUE(kw.is_ok());
  EXPECT_FALSE(kw->thinking);
  EXPECT_EQ(rejected(req(R"("chat_template_kwargs":{"enable_thinking":true})"))["param"],
            "chat_template_kwargs.enable_thinking");
}

TEST(ChatParams, UnimplementedFieldsAreA400NamingThem) {
  const char* fields[] = {
      R"("use_beam_search":false)",
      R"("audio":{"voice":"alloy","format":"wav"})",
      R"("prediction":{"type":"content","content":"x"})",
      R"("web_search_options":{})",
      R"("functions":[{"name":"f"}])",
      R"("function_call":"auto")",
      R"("prompt_logprobs":1)",
      R"("truncate_prompt_tokens":0)",
      R"("stop_token_ids":[1])",
      R"("use_beam_search":true)",
      R"("best_of":2)",
      R"("parallel_tool_calls":false)",
      R"("store":true)",
      R"("echo":true)",
      R"("continue_final_message":true)",
      R"("include_stop_str_in_output":"yes")",
      R"("modalities":["text","audio"])",
      R"("service_tier":"priority")",
      R"("verbosity":"low")",
      R"("moderation":{})",
      R"("prompt_cache_options":{"ttl":"30m"})",
      R"("prompt_cache_retention":"24h")",
  };
  for (const char* f : fields) {
    std::string body = req(f);
    json err = rejected(body);
    std::string name = std::string(f).substr(1, std::string(f).find('"', 1) - 1);
    EXPECT_EQ(err["param"], name) << body;
    EXPECT_EQ(err["type"], "invalid_request_error");
  }
  json strict = rejected(req(
      R"("tools":[{"type":"function","function":{"name":"f","strict":1,"parameters":{"type":"object"}}}])"));
  EXPECT_EQ(strict["param"], "tools[0].function.strict");
  EXPECT_EQ(rejected(req(R"("stream":true,"stream_options":{"include_usage":"yes"})"))["param"],
            "stream_options.include_usage");
  EXPECT_EQ(rejected(req("", R"([{"role":"user","name":"alice","content":"hi"}])"))["param"],
            "messages[0].name");
  EXPECT_EQ(rejected(req("", R"([{"role":"user","content":"hi"},{"role":"assistant","content":"",)"
                             R"("function_call":{"name":"f","arguments":"{}"}}])"))["param"],
            "messages[1].function_call");
  // An image without a vision tower names the part.
  json img = rejected(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]})");
  EXPECT_EQ(img["param"], "messages[0].content[1]");
}

TEST(ChatParams, FieldsWithoutEffectOnOutputAreAccepted) {
  auto r = parse_chat_request(
      req(R"("metadata":{"k":"v"},"user":"u1","store":false,"parallel_tool_calls":true,)"
          R"("service_tier":"auto","safety_identifier":"s","prompt_cache_key":"p",)"
          R"("modalities":["text"],"verbosity":"medium","logit_bias":null,"ignore_eos":true)"),
      {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->sampling.ignore_eos);
  EXPECT_EQ(rejected(req(R"("metadata":"x")"))["param"], "metadata");
}

TEST(ChatParams, StreamedLogprobsInOpenAisShape) {
  ChatResponder r("c1", "m", 1, true, false, {.index = 0, .n = 1, .logprobs = true});
  // Reasoning tokens' log probabilities are not content logprobs.
  std::string out = r.stream({{K::kReasoning, "hmm"}}, {}, {{"hmm", -0.1f, {}}});
  // A token that produced nothing yet (held back) waits for the content it becomes.
  out += r.stream({}, {}, {{"He", -0.25f, {{"He", -0.25f}, {"Hi", -2.0f}}}});
  out +=
      r.stream({{K::kContent, "Hel"}}, {}, {{"l", -0.5f, {{"l", -0.5f}, {"\xe4\xbd", -INFINITY}}}});
  auto frames = data_frames(out);
  ASSERT_EQ(frames.size(), 3u);  // role, reasoning, content
  EXPECT_TRUE(frames[0]["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(frames[1]["choices"][0]["logprobs"].is_null());
  // https://platform.openai.com/docs/api-reference/chat/streaming: choices[].logprobs.content[]
  // {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}.
  json expected = json::parse(R"({"content":[
      {"token":"He","logprob":-0.25,"bytes":[72,101],"top_logprobs":[
          {"token":"He","logprob":-0.25,"bytes":[72,101]},
          {"token":"Hi","logprob":-2.0,"bytes":[72,105]}]},
      {"token":"l","logprob":-0.5,"bytes":[108],"top_logprobs":[
          {"token":"l","logprob":-0.5,"bytes":[108]},
          {"token":"\ufffd","logprob":-9999.0,"bytes":[228,189]}]}]})");
  EXPECT_EQ(frames[2]["choices"][0]["logprobs"], expected);
  ChatResponder c("c1", "m", 1, false, false, {.index = 0, .n = 1, .logprobs = true});
  c.add({{K::kContent, "Hi"}}, {{"Hi", -0.75f, {}}});
  json full = json::parse(c.complete({}));
  EXPECT_EQ(full["choices"][0]["logprobs"],
            json::parse(R"({"content":[{"token":"Hi","logprob":-0.75,"bytes":[72,105],)"
                        R"("top_logprobs":[]}]})"));
  ChatResponder none("c1", "m", 1, false, false);
  none.add({{K::kContent, "Hi"}}, {{"Hi", -0.75f, {}}});
  EXPECT_TRUE(json::parse(none.complete({}))["choices"][0]["logprobs"].is_null());
}

TEST(ChatParams, NChoicesStreamAndComplete) {
  prompt::ParserEvent stop{K::kFinish, ""};
  prompt::ParserEvent len{K::kFinish, ""};
  len.finish = prompt::FinishReason::kLength;
  std::vector<ChatResponder> rs;
  for (int i = 0; i < 2; ++i) rs.emplace_back("c1", "m", 9, false, true, ChatChoice{i, 2, false});
  bool done = false;
  std::string a = rs[1].stream({{K::kContent, "B"}, len}, {});
  std::string b = rs[0].stream({{K::kContent, "A"}, stop}, {});
  auto fa = data_frames(a + b, &done);
  EXPECT_FALSE(done);  // [DONE] waits for the tail, after every choice finished
  for (const json& f : fa) {
    ASSERT_EQ(f["choices"].size(), 1u);
    EXPECT_TRUE(f["usage"].is_null());
  }
  EXPECT_EQ(fa[0]["choices"][0]["index"], 1);
  EXPECT_TRUE(rs[0].finished() && rs[1].finished());
  Usage total{10, 7, 0, 3};
  auto tail = data_frames(rs[0].stream_tail(total), &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_TRUE(tail[0]["choices"].empty());
  EXPECT_EQ(tail[0]["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);
  EXPECT_EQ(tail[0]["usage"]["total_tokens"], 17);

  std::vector<ChatResponder> folded;
  for (int i : {1, 0}) folded.emplace_back("c1", "m", 9, false, true, ChatChoice{i, 2, false});
  folded[0].add({{K::kContent, "B"}, len});
  folded[1].add({{K::kContent, "A"}, stop});
  json full = json::parse(chat_completion_json(folded, total));
  ASSERT_EQ(full["choices"].size(), 2u);
  EXPECT_EQ(full["choices"][0]["index"], 0);
  EXPECT_EQ(full["choices"][0]["message"]["content"], "A");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(full["choices"][1]["index"], 1);
  EXPECT_EQ(full["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(full["usage"]["completion_tokens"], 7);
  EXPECT_EQ(full["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);
}

}  // namespace
}  // namespace fathom::api
