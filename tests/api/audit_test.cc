// Anthropic Messages and OpenAI Responses fields that deepseek-recipe accepted and ignored:
// each is now honoured (thinking.budget_tokens, reasoning tokens in the Responses usage) or a
// 400 that names it in the protocol's error shape; fields with no effect on the output by
// definition are accepted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/anthropic_messages.h"
#include "api/errors.h"
#include "api/openai_responses.h"

namespace fathom::api {
namespace {

using nlohmann::json;

std::string messages(const std::string& extra,
                     const std::string& msgs = R"([{"role":"user","content":"hi"}])") {
  return R"({"model":"m","max_tokens":4096,"messages":)" + msgs +
         (extra.empty() ? "" : "," + extra) + "}";
}

// Anthropic's error message of a rejected request (a 400 invalid_request_error).
std::string messages_rejected(const std::string& body) {
  auto r = parse_messages_request(body, {});
  EXPECT_FALSE(r.is_ok()) << "accepted: " << body;
  if (r.is_ok()) return "";
  EXPECT_EQ(anthropic_http_status_of(r.status()), 400);
  json e = json::parse(anthropic_error_json(r.status()));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  return e["error"]["message"];
}

json responses_rejected(const std::string& body) {
  auto r = parse_responses_request(body, {});
  EXPECT_FALSE(r.is_ok()) << "accepted: " << body;
  if (r.is_ok()) return json::object();
  EXPECT_EQ(http_status_of(r.status()), 400);
  return json::parse(openai_error_json(r.status()))["error"];
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

TEST(MessagesAudit, ThinkingBudgetIsHonouredWithAnthropicsRules) {
  auto r =
      parse_messages_request(messages(R"("thinking":{"type":"enabled","budget_tokens":1024})"), {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->thinking);
  EXPECT_EQ(r->reasoning_budget, 1024);
  EXPECT_EQ(parse_messages_request(messages(""), {})->reasoning_budget, -1);
  EXPECT_TRUE(starts_with(
      messages_rejected(messages(R"("thinking":{"type":"enabled","budget_tokens":1023})")),
      "thinking.budget_tokens: must be at least 1024"));
  EXPECT_TRUE(starts_with(
      messages_rejected(messages(R"("thinking":{"type":"enabled","budget_tokens":4096})")),
      "thinking.budget_tokens: must be less than max_tokens"));
  EXPECT_TRUE(starts_with(
      messages_rejected(messages(R"("thinking":{"type":"enabled","budget_tokens":"many"})")),
      "'thinking.budget_tokens'"));
  EXPECT_TRUE(starts_with(
      messages_rejected(messages(R"("thinking":{"type":"disabled","budget_tokens":2048})")),
      "thinking.budget_tokens"));
}

TEST(MessagesAudit, UnimplementedInputIsRejectedNamingIt) {
  EXPECT_TRUE(starts_with(
      messages_rejected(messages(
          "",
          R"([{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}])")),
      "messages.0.content.1: image blocks are not supported"));
  EXPECT_TRUE(starts_with(
      messages_rejected(messages(
          "",
          R"([{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]}])")),
      "messages.0.content.0: document blocks are not supported"));
  // An image inside a tool_result is no longer replaced by "[Unsupported image]".
  std::string tool_use =
      R"([{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},)"
      R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{}}]}]}])";
  EXPECT_NE(messages_rejected(
                messages(R"("tools":[{"name":"f","input_schema":{"type":"object"}}])", tool_use))
                .find("unsupported block type 'image'"),
            std::string::npos);
  EXPECT_TRUE(starts_with(messages_rejected(messages(R"("mcp_servers":[{}])")), "mcp_servers:"));
  EXPECT_TRUE(starts_with(
      messages_rejected(
          messages(R"("tools":[{"name":"f","strict":"yes","input_schema":{"type":"object"}}])")),
      "tools.0.strict:"));
  EXPECT_TRUE(starts_with(messages_rejected(messages(R"("container":"c")")), "container:"));
  EXPECT_TRUE(starts_with(
      messages_rejected(messages(
          R"("tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true})")),
      "tool_choice.disable_parallel_tool_use"));
  EXPECT_TRUE(
      starts_with(messages_rejected(messages(R"("service_tier":"priority")")), "service_tier:"));
  EXPECT_TRUE(
      starts_with(messages_rejected(messages(R"("diagnostics":{"previous_message_id":"m"})")),
                  "diagnostics: not supported"));
  EXPECT_TRUE(starts_with(messages_rejected(messages(R"("inference_geo":"us")")),
                          "inference_geo: not supported"));
  EXPECT_TRUE(starts_with(messages_rejected(messages(R"("speed":"fast")")), "speed: only"));
  // No effect on the output: accepted.
  auto ok = parse_messages_request(
      messages(
          R"("metadata":{"user_id":"u"},"service_tier":"auto","top_k":5,"speed":"standard",)"
          R"("stop_sequences":["END"],"tools":[{"name":"f","input_schema":{"type":"object"}}],)"
          R"("tool_choice":{"type":"auto","disable_parallel_tool_use":false})"),
      {});
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->sampling.top_k, 5);
  EXPECT_EQ(ok->sampling.stop, std::vector<std::string>{"END"});
}

TEST(ResponsesAudit, UnimplementedFieldsAreA400NamingThem) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"input":"hi","text":{"format":{"type":"json_schema","name":"x"}}})",
       "text.format.schema"},
      {R"({"input":"hi","tools":[{"type":"web_search"}]})", "tools[0]"},
      {R"({"input":"hi","background":true})", "background"},
      {R"({"input":"hi","store":true})", "store"},
      {R"({"input":"hi","parallel_tool_calls":false})", "parallel_tool_calls"},
      {R"({"input":"hi","include":["message.output_text.logprobs"]})", "include"},
      {R"({"input":"hi","truncation":"auto"})", "truncation"},
      {R"({"input":"hi","max_tool_calls":3})", "max_tool_calls"},
      {R"({"input":"hi","top_logprobs":2})", "top_logprobs"},
      {R"({"input":"hi","prompt":{"id":"pmpt_1"}})", "prompt"},
      {R"({"input":"hi","conversation":"conv_1"})", "conversation"},
      {R"({"input":"hi","moderation":{}})", "moderation"},
      {R"({"input":"hi","prompt_cache_retention":"24h"})", "prompt_cache_retention"},
      {R"({"input":"hi","prompt_cache_options":{"ttl":"30m"}})", "prompt_cache_options"},
      {R"({"input":"hi","context_management":[]})", "context_management"},
      {R"({"input":"hi","stream":true,"stream_options":{"include_obfuscation":true}})",
       "stream_options.include_obfuscation"},
      {R"({"input":"hi","stream":true,"stream_options":{"include_usage":true}})",
       "stream_options.include_usage"},
      {R"({"input":"hi","service_tier":"flex"})", "service_tier"},
      {R"({"input":"hi","text":{"verbosity":"high"}})", "text.verbosity"},
      {R"({"input":"hi","tools":[{"type":"function","name":"f","strict":"yes"}]})",
       "tools[0].strict"},
      {R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AA=="}]}]})",
       "input[0].content[0]"},
  };
  for (const Case& c : cases) {
    json e = responses_rejected(c.body);
    EXPECT_EQ(e["param"], c.param) << c.body << "\n" << e.dump();
    EXPECT_EQ(e["type"], "invalid_request_error");
  }
  // deepseek-recipe's responses_web_search = Ignore, when the operator asks for it.
  ResponsesOptions ignore;
  ignore.ignore_web_search_tools = true;
  EXPECT_TRUE(
      parse_responses_request(R"({"input":"hi","tools":[{"type":"web_search"}]})", ignore).is_ok());
  // No effect on the output (or, for encrypted reasoning, served by the plain reasoning text).
  auto ok = parse_responses_request(
      R"({"input":"hi","metadata":{"k":"v"},"user":"u","store":false,"parallel_tool_calls":true,)"
      R"("include":["reasoning.encrypted_content"],"truncation":"disabled","service_tier":"auto",)"
      R"("reasoning":{"effort":"low","summary":"auto"},"text":{"verbosity":"medium"},)"
      R"("stream":true,"stream_options":{"include_obfuscation":false}})",
      {});
  EXPECT_TRUE(ok.is_ok()) << ok.status().message();
}

TEST(ResponsesAudit, ReasoningTokensComeFromTheUsage) {
  using K = prompt::ParserEvent::Kind;
  ResponsesResponder r("r1", "m", 1);
  prompt::ParserEvent fin{K::kFinish, ""};
  r.add({{K::kReasoning, "think"}, {K::kContent, "ok"}, fin});
  Usage u{10, 6, 2, 4};
  json full = json::parse(r.complete(u));
  // https://platform.openai.com/docs/api-reference/responses/object: usage.
  EXPECT_EQ(full["usage"], json::parse(R"({"input_tokens":10,"input_tokens_details":)"
                                       R"({"cached_tokens":2},"output_tokens":6,)"
                                       R"("output_tokens_details":{"reasoning_tokens":4},)"
                                       R"("total_tokens":16})"));
  EXPECT_TRUE(full["error"].is_null());
  ResponsesResponder s("r2", "m", 1);
  std::string sse = s.stream({{K::kContent, "ok"}, fin}, u);
  size_t at = sse.find("event: response.completed\ndata: ");
  ASSERT_NE(at, std::string::npos);
  size_t start = at + std::string("event: response.completed\ndata: ").size();
  json done = json::parse(sse.substr(start, sse.find("\n\n", start) - start));
  EXPECT_EQ(done["response"]["usage"]["output_tokens_details"]["reasoning_tokens"], 4);
}

}  // namespace
}  // namespace fathom::api
