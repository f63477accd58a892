// Errors reach the client in the protocol's own shape: the HTTP status and body of each
// Status code, model_not_found as OpenAI and Anthropic document it, and the mid-stream error
// of each protocol (Chat Completions as vLLM sends it, Anthropic's `event: error`, Responses'
// `error` + `response.failed`). Also the served-model list and its thinking defaults.
#include "api/errors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/anthropic_messages.h"
#include "api/chat_completions.h"
#include "api/models.h"
#include "api/openai_responses.h"

namespace fathom::api {
namespace {

using nlohmann::json;
using K = prompt::ParserEvent::Kind;

struct SseEvent {
  std::string event;  // empty when the frame has no `event:` line
  std::string data;
};

// Splits an SSE text into frames; every frame must end with a blank line.
std::vector<SseEvent> sse(const std::string& text) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated frame: " << text.substr(pos);
    if (end == std::string::npos) break;
    std::string frame = text.substr(pos, end - pos);
    SseEvent e;
    size_t line_start = 0;
    while (line_start <= frame.size()) {
      size_t nl = frame.find('\n', line_start);
      std::string line = frame.substr(line_start, nl == std::string::npos ? nl : nl - line_start);
      if (line.rfind("event: ", 0) == 0) e.event = line.substr(7);
      if (line.rfind("data: ", 0) == 0) e.data = line.substr(6);
      if (nl == std::string::npos) break;
      line_start = nl + 1;
    }
    out.push_back(e);
    pos = end + 2;
  }
  return out;
}

TEST(Errors, StatusCodesAndTypesPerProtocol) {
  struct Case {
    Status s;
    int openai_status;
    const char* openai_type;
    int anthropic_status;
    const char* anthropic_type;
  };
  const Case cases[] = {
      {invalid_argument("'temperature' must be in [0, 2]"), 400, "invalid_request_error", 400,
       "invalid_request_error"},
      {unsupported("x"), 400, "invalid_request_error", 400, "invalid_request_error"},
      {out_of_range("x"), 400, "invalid_request_error", 400, "invalid_request_error"},
      {not_found("x"), 404, "invalid_request_error", 404, "not_found_error"},
      {Status(StatusCode::kResourceExhausted, "the KV cache is full"), 503, "server_error", 529,
       "overloaded_error"},
      {internal_error("boom"), 500, "server_error", 500, "api_error"},
      {cancelled("the server is shutting down"), 503, "server_error", 503, "api_error"},
      {io_error("disk"), 500, "server_error", 500, "api_error"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(http_status_of(c.s), c.openai_status) << c.s.message();
    EXPECT_EQ(anthropic_http_status_of(c.s), c.anthropic_status) << c.s.message();
    json o = json::parse(openai_error_json(c.s));
    EXPECT_EQ(o["error"]["type"], c.openai_type);
    EXPECT_EQ(o["error"]["message"], c.s.message());
    EXPECT_TRUE(o["error"].contains("param"));
    EXPECT_TRUE(o["error"].contains("code"));
    json a = json::parse(anthropic_error_json(c.s));
    EXPECT_EQ(a, json({{"type", "error"},
                       {"error", {{"type", c.anthropic_type}, {"message", c.s.message()}}}}));
  }
}

TEST(Errors, ParamNamesTheField) {
  EXPECT_EQ(json::parse(openai_error_json(
                invalid_argument("'temperature' must be in [0, 2]")))["error"]["param"],
            "temperature");
  EXPECT_EQ(json::parse(openai_error_json(
                invalid_argument("messages[2].content[0]: no images")))["error"]["param"],
            "messages[2].content[0]");
  EXPECT_TRUE(json::parse(openai_error_json(
      invalid_argument("request body is not valid JSON: x")))["error"]["param"]
                  .is_null());
  EXPECT_TRUE(json::parse(openai_error_json(internal_error("x: y")))["error"]["param"].is_null());
}

TEST(Errors, ModelNotFoundInOpenAiAndAnthropicShapes) {
  Status s = model_not_found("gpt-5");
  EXPECT_TRUE(is_model_not_found(s));
  EXPECT_FALSE(is_model_not_found(not_found("The model `gpt-5`")));
  EXPECT_EQ(http_status_of(s), 404);
  // OpenAI's documented body for an unknown model.
  EXPECT_EQ(json::parse(openai_error_json(s)),
            json::parse(R"({"error":{"message":"The model `gpt-5` does not exist or you do not )"
                        R"(have access to it.","type":"invalid_request_error","param":"model",)"
                        R"("code":"model_not_found"}})"));
  json a = json::parse(anthropic_error_json(s));
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "not_found_error");
  EXPECT_EQ(anthropic_http_status_of(s), 404);
}

TEST(Errors, OpenAiMidStreamErrorThenDone) {
  auto ev = sse(openai_stream_error(Status(StatusCode::kResourceExhausted, "overloaded")));
  ASSERT_EQ(ev.size(), 2u);
  json e = json::parse(ev[0].data);
  EXPECT_EQ(e["error"]["message"], "overloaded");
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_EQ(ev[1].data, "[DONE]");
}

TEST(Errors, ChatResponderEndsTheStreamWithAnErrorNotAFinish) {
  ChatResponder r("chatcmpl-1", "m", 7, false, true);
  std::string out = r.stream({{K::kContent, "Hel"}}, {});
  out += r.stream_error(internal_error("the engine failed"));
  auto ev = sse(out);
  ASSERT_EQ(ev.size(), 4u);  // role, "Hel", error, [DONE]
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(json::parse(ev[i].data)["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(json::parse(ev[2].data),
            json::parse(R"({"error":{"message":"the engine failed","type":"server_error",)"
                        R"("param":null,"code":"internal"}})"));
  EXPECT_EQ(ev[3].data, "[DONE]");
}

TEST(Errors, AnthropicMidStreamErrorEvent) {
  MessagesResponder r("abc", "m", false);
  std::string out = r.stream({{K::kContent, "Hi"}}, {});
  std::string err = r.stream_error(Status(StatusCode::kResourceExhausted, "Overloaded"));
  // Anthropic's streaming docs: event: error / data: {"type": "error", "error": {"type":
  // "overloaded_error", "message": "Overloaded"}}.
  auto ev = sse(err);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event, "error");
  EXPECT_EQ(json::parse(ev[0].data),
            json::parse(R"({"type":"error","error":{"type":"overloaded_error",)"
                        R"("message":"Overloaded"}})"));
  for (const SseEvent& e : sse(out)) EXPECT_NE(e.event, "message_stop");
}

TEST(Errors, ResponsesMidStreamErrorAndResponseFailed) {
  ResponsesResponder r("r1", "m", 5);
  Usage u;
  u.prompt_tokens = 10;
  u.completion_tokens = 2;
  std::string out = r.stream({{K::kContent, "Hi"}}, u);
  std::string err = r.stream_error(internal_error("the engine failed"), u);
  auto ev = sse(err);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].event, "error");
  json e = json::parse(ev[0].data);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["code"], "server_error");
  EXPECT_EQ(e["message"], "the engine failed");
  EXPECT_TRUE(e["param"].is_null());
  EXPECT_TRUE(e["sequence_number"].is_number_integer());
  EXPECT_EQ(ev[1].event, "response.failed");
  json f = json::parse(ev[1].data);
  EXPECT_EQ(f["type"], "response.failed");
  EXPECT_GT(f["sequence_number"].get<int>(), e["sequence_number"].get<int>());
  EXPECT_EQ(f["response"]["object"], "response");
  EXPECT_EQ(f["response"]["status"], "failed");
  EXPECT_EQ(f["response"]["error"],
            json::parse(R"({"code":"server_error","message":"the engine failed"})"));
  EXPECT_EQ(f["response"]["output"][0]["type"], "message");
  EXPECT_EQ(f["response"]["output"][0]["content"][0]["text"], "Hi");

  // Failing before any event (a heartbeat committed the stream): the stream still opens with
  // response.created and response.in_progress, which openai-python's stream helper requires
  // before an error event.
  ResponsesResponder early("r2", "m", 5);
  auto ev2 = sse(early.stream_error(invalid_argument("'text.format': too large"), Usage{}));
  ASSERT_EQ(ev2.size(), 4u);
  EXPECT_EQ(ev2[0].event, "response.created");
  EXPECT_EQ(ev2[1].event, "response.in_progress");
  EXPECT_EQ(ev2[2].event, "error");
  EXPECT_EQ(json::parse(ev2[2].data)["code"], "invalid_prompt");
  EXPECT_EQ(ev2[3].event, "response.failed");
  EXPECT_EQ(json::parse(ev2[3].data)["response"]["status"], "failed");
}

TEST(ServedModels, ResolveAndDeepSeekAliases) {
  auto models = served_models_with_deepseek_aliases("DeepSeek-V4.1", true);
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[1].name, "deepseek-chat");
  EXPECT_FALSE(models[1].default_thinking);
  EXPECT_EQ(models[2].name, "deepseek-reasoner");
  EXPECT_TRUE(models[2].default_thinking);
  EXPECT_EQ(served_models_with_deepseek_aliases("deepseek-chat", false).size(), 2u);
  auto first = resolve_model(models, "");
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ((*first)->name, "DeepSeek-V4.1");
  auto chat = resolve_model(models, "deepseek-chat");
  ASSERT_TRUE(chat.is_ok());
  EXPECT_FALSE((*chat)->default_thinking);
  auto unknown = resolve_model(models, "gpt-4o");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_TRUE(is_model_not_found(unknown.status()));
  json list = json::parse(models_list_json(models, 42, 65536));
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 3u);
  EXPECT_EQ(list["data"][2], json::parse(R"({"id":"deepseek-reasoner","object":"model",)"
                                         R"("created":42,"owned_by":"fathom",)"
                                         R"("root":"deepseek-reasoner","max_model_len":65536})"));
}

TEST(ServedModels, ParsersApplyTheModelsThinkingDefault) {
  auto models = served_models_with_deepseek_aliases("DeepSeek-V4.1", true);
  ChatOptions co;
  co.models = &models;
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  auto chat = parse_chat_request(R"({"model":"deepseek-chat",)" + msgs + "}", co);
  ASSERT_TRUE(chat.is_ok()) << chat.status().message();
  EXPECT_FALSE(chat->thinking);
  auto reasoner = parse_chat_request(R"({"model":"deepseek-reasoner",)" + msgs + "}", co);
  ASSERT_TRUE(reasoner.is_ok());
  EXPECT_TRUE(reasoner->thinking);
  auto dflt = parse_chat_request("{" + msgs + "}", co);
  ASSERT_TRUE(dflt.is_ok());
  EXPECT_EQ(dflt->model, "DeepSeek-V4.1");
  // The request's own switch still wins over the model's default.
  auto on = parse_chat_request(
      R"({"model":"deepseek-chat","thinking":{"type":"enabled"},)" + msgs + "}", co);
  ASSERT_TRUE(on.is_ok());
  EXPECT_TRUE(on->thinking);
  auto missing = parse_chat_request(R"({"model":"gpt-4o",)" + msgs + "}", co);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(http_status_of(missing.status()), 404);
  EXPECT_EQ(json::parse(openai_error_json(missing.status()))["error"]["code"], "model_not_found");

  MessagesOptions mo;
  mo.models = &models;
  auto m = parse_messages_request(R"({"model":"deepseek-chat","max_tokens":8,)" + msgs + "}", mo);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_FALSE(m->thinking);
  auto m404 = parse_messages_request(R"({"model":"claude","max_tokens":8,)" + msgs + "}", mo);
  ASSERT_FALSE(m404.is_ok());
  EXPECT_EQ(json::parse(anthropic_error_json(m404.status()))["error"]["type"], "not_found_error");

  ResponsesOptions ro;
  ro.models = &models;
  auto r = parse_responses_request(R"({"model":"deepseek-chat","input":"hi"})", ro);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r->thinking);
  auto rr = parse_responses_request(R"({"model":"deepseek-reasoner","input":"hi"})", ro);
  ASSERT_TRUE(rr.is_ok());
  EXPECT_TRUE(rr->thinking);
}

}  // namespace
}  // namespace fathom::api
