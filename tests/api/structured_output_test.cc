// The adapters' structured-output fields: response_format / text.format json_schema and
// json_object, vLLM's structured_outputs and guided_* fields, llama-server's grammar and
// json_schema; one constraint per request; malformed values are a 400 naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "api/chat_completions.h"
#include "api/completions.h"
#include "api/errors.h"
#include "api/openai_responses.h"

namespace fathom::api {
namespace {

using json = nlohmann::json;
using Kind = StructuredOutput::Kind;

std::string chat(const std::string& extra) {
  return R"({"model":"m","messages":[{"role":"user","content":"hi json"}],)" + extra + "}";
}
std::string completions(const std::string& extra) {
  return R"({"model":"m","prompt":"hi",)" + extra + "}";
}

StructuredOutput chat_ok(const std::string& extra) {
  auto r = parse_chat_request(chat(extra), {});
  EXPECT_TRUE(r.is_ok()) << extra << ": " << r.status().message();
  return r.is_ok() ? r->structured : StructuredOutput{};
}
StructuredOutput completions_ok(const std::string& extra) {
  auto r = parse_completions_request(completions(extra), {});
  EXPECT_TRUE(r.is_ok()) << extra << ": " << r.status().message();
  return r.is_ok() ? r->structured : StructuredOutput{};
}
std::string param_of(const Status& s) {
  EXPECT_EQ(http_status_of(s), 400) << s.message();
  return json::parse(openai_error_json(s))["error"]["param"].get<std::string>();
}

TEST(StructuredOutputFields, ChatResponseFormat) {
  StructuredOutput s =
      chat_ok(R"("response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,)"
              R"("schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})");
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(json::parse(s.text),
            json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})"));
  EXPECT_EQ(s.field, "response_format.json_schema.schema");
  auto r = parse_chat_request(
      chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}})"),
      {});
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->response_format.is_null());  // shown to the model on the system message
  EXPECT_EQ(chat_ok(R"("response_format":{"type":"json_object"})").kind, Kind::kJsonObject);
  EXPECT_EQ(chat_ok(R"("response_format":{"type":"text"})").kind, Kind::kNone);
  EXPECT_EQ(param_of(parse_chat_request(
                         chat(R"("response_format":{"type":"json_schema","json_schema":{}})"), {})
                         .status()),
            "response_format.json_schema.schema");
}

TEST(StructuredOutputFields, VllmFieldsOnChatAndCompletions) {
  for (auto parse : {chat_ok, completions_ok}) {
    StructuredOutput s = parse(R"("structured_outputs":{"regex":"[a-c]+"})");
    EXPECT_EQ(s.kind, Kind::kRegex);
    EXPECT_EQ(s.text, "[a-c]+");
    EXPECT_EQ(s.field, "structured_outputs.regex");
    s = parse(R"("structured_outputs":{"choice":["yes","no"]})");
    EXPECT_EQ(s.kind, Kind::kChoice);
    EXPECT_EQ(s.choices, (std::vector<std::string>{"yes", "no"}));
    s = parse(R"("structured_outputs":{"json":"{\"type\":\"integer\"}"})");
    EXPECT_EQ(s.kind, Kind::kJsonSchema);
    EXPECT_EQ(s.text, R"({"type":"integer"})");
    EXPECT_EQ(parse(R"("structured_outputs":{"grammar":"root ::= \"a\""})").kind, Kind::kGbnf);
    EXPECT_EQ(parse(R"("structured_outputs":{"json_object":true})").kind, Kind::kJsonObject);
    EXPECT_EQ(parse(R"("guided_json":{"type":"string"})").kind, Kind::kJsonSchema);
    EXPECT_EQ(parse(R"("guided_regex":"a")").kind, Kind::kRegex);
    EXPECT_EQ(parse(R"("guided_choice":["a"])").kind, Kind::kChoice);
    s = parse(R"("guided_grammar":"root ::= \"a\"")");
    EXPECT_EQ(s.kind, Kind::kGbnf);
    EXPECT_EQ(s.field, "guided_grammar");
  }
  EXPECT_EQ(param_of(parse_chat_request(chat(R"("guided_choice":[])"), {}).status()),
            "guided_choice");
  EXPECT_EQ(
      param_of(
          parse_chat_request(chat(R"("structured_outputs":{"structural_tag":"x"})"), {}).status()),
      "structured_outputs.structural_tag");
  // One constraint per request.
  EXPECT_EQ(param_of(parse_chat_request(chat(R"("response_format":{"type":"json_object"},)"
                                             R"("guided_regex":"a")"),
                                        {})
                         .status()),
            "guided_regex");
  EXPECT_EQ(param_of(parse_completions_request(
                         completions(R"("guided_regex":"a","grammar":"root ::= \"a\"")"), {})
                         .status()),
            "grammar");
}

TEST(StructuredOutputFields, LlamaServerFieldsAndResponses) {
  StructuredOutput s = completions_ok(R"("grammar":"root ::= [a-z]+")");
  EXPECT_EQ(s.kind, Kind::kGbnf);
  EXPECT_EQ(s.field, "grammar");
  s = completions_ok(R"("json_schema":{"type":"array","maxItems":2})");
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.field, "json_schema");
  auto r = parse_responses_request(
      R"({"input":"hi","text":{"format":{"type":"json_schema","name":"x","strict":true,)"
      R"("schema":{"type":"object"}}}})",
      {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->structured.kind, Kind::kJsonSchema);
  EXPECT_EQ(r->structured.field, "text.format.schema");
  r = parse_responses_request(R"({"input":"hi json","text":{"format":{"type":"json_object"}}})",
                              {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->structured.kind, Kind::kJsonObject);
}

}  // namespace
}  // namespace fathom::api
