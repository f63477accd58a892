// The OpenAI Responses adapter: validation, input-item grouping, tool flattening, and the
// event stream / final response object.
#include "api/openai_responses.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/errors.h"

namespace fathom::api {
namespace {

void expect_rejected(const std::string& b, const std::string& mention) {
  auto r = parse_responses_request(b, {});
  ASSERT_FALSE(r.is_ok()) << "accepted: " << b.substr(0, 300);
  auto err = nlohmann::json::parse(openai_error_json(r.status()));
  std::string msg = err["error"]["message"].get<std::string>();
  EXPECT_NE(msg.find(mention), std::string::npos)
      << "message: " << msg << "\nbody: " << b.substr(0, 300);
}

TEST(ResponsesRequest, ValidationRules) {
  expect_rejected("{x", "not valid JSON");
  expect_rejected(R"({"model":"m"})", "'input' is required");
  expect_rejected(R"({"input":"hi","previous_response_id":"resp_1"})", "previous_response_id");
  expect_rejected(R"({"input":"hi","temperature":9})", "'temperature'");
  expect_rejected(R"({"input":"hi","max_output_tokens":0})", "'max_output_tokens'");
  expect_rejected(R"({"input":"hi","reasoning":{"effort":"turbo"}})", "'reasoning.effort'");
  expect_rejected(R"({"input":"hi","text":{"format":{"type":"json_object"}}})",
                  "the word \"json\"");
  expect_rejected(R"({"input":"hi","tools":[{"type":"custom","name":"run_sql"}]})",
                  "only supported custom tool is apply_patch");
  expect_rejected(R"({"input":"hi","tools":[{"type":"function","name":"f g"}]})",
                  "1-128 characters");
  expect_rejected(
      R"({"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":"required"})",
      "Thinking mode does not support");
  expect_rejected(
      R"({"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"},"reasoning":{"effort":"none"}})",
      "unknown tool");
  expect_rejected(R"({"input":[{"type":"function_call_output","call_id":"c9","output":"x"}]})",
                  "unknown call_id");
  expect_rejected(
      R"({"input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]})",
      "has no function_call_output");
  expect_rejected(
      R"({"input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]})",
      "duplicate call_id");
  expect_rejected(R"({"input":[{"type":"reasoning","encrypted_content":"xyz"}]})",
                  "encrypted_content");
  expect_rejected(R"({"input":[{"role":"tool","content":"x"}]})", "unsupported role");
  expect_rejected(R"({"input":[{"type":"web_search_call"}]})", "unsupported input item type");
  expect_rejected(R"({"input":"see <｜deepseek_image｜>"})", "is not allowed");
  // text and reasoning are objects of OpenAI's keys (ResponseTextConfig, Reasoning).
  for (const char* v : {"\"x\"", "5", "[]", "true"}) {
    expect_rejected(std::string(R"({"input":"hi","text":)") + v + "}", "'text' must be an object");
    expect_rejected(std::string(R"({"input":"hi","reasoning":)") + v + "}",
                    "'reasoning' must be an object");
  }
  expect_rejected(R"({"input":"hi","text":{"bogus":1}})", "'text.bogus'");
  expect_rejected(R"({"input":"hi","text":{"format":"json"}})", "'text.format' must be an object");
  expect_rejected(R"({"input":"hi","text":{"format":{"type":"text","bogus":1}}})",
                  "'text.format.bogus'");
  expect_rejected(R"({"input":"hi","reasoning":{"effort":"high","bogus":1}})", "'reasoning.bogus'");
  expect_rejected(R"({"input":"hi","reasoning":{"summary":"verbose"}})", "'reasoning.summary'");
  for (
      const char* ok :
      {R"({"input":"hi","text":null,"reasoning":null})",
       R"({"input":"hi","text":{"format":null,"verbosity":null},"reasoning":{"effort":null}})",
       R"({"input":"hi","reasoning":{"effort":"high","summary":"auto"},"text":{"verbosity":"medium"}})",
       R"({"input":"json please","text":{"format":{"type":"json_schema","name":"x","strict":true,"description":"d","schema":{"type":"object"}}}})"})
    EXPECT_TRUE(parse_responses_request(ok, {}).is_ok())
        << ok << ": " << parse_responses_request(ok, {}).status().message();
}

TEST(ResponsesRequest, GroupsCallsAndFlattensTools) {
  auto r = parse_responses_request(
      R"({"instructions":"Be exact.","reasoning":{"effort":"none"},
          "tools":[{"type":"namespace","name":"fs","description":"Files.","tools":[{"name":"read","description":"Read one."}]},
                   {"type":"function","name":"fetch","parameters":{"type":"object","properties":{}}},
                   {"type":"custom","name":"apply_patch"}],
          "input":[{"role":"developer","content":"dev note"},{"role":"user","content":[{"type":"input_text","text":"go"}]},
                   {"type":"reasoning","content":[{"type":"reasoning_text","text":"plan"}]},
                   {"role":"assistant","content":[{"type":"output_text","text":"working"}]},
                   {"type":"function_call","call_id":"b","name":"fetch","arguments":"{\"u\": 1}"},
                   {"type":"custom_tool_call","call_id":"a","name":"apply_patch","input":"*** Begin Patch"},
                   {"type":"function_call_output","call_id":"b","output":"B"},
                   {"type":"custom_tool_call_output","call_id":"a","output":"A"}]})",
      {});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_FALSE(r->thinking);
  ASSERT_EQ(r->tools.items.size(), 3u);
  EXPECT_EQ(r->tools.items[0].find("function")->find("name")->text, "fs::read");
  EXPECT_EQ(r->tools.items[0].find("function")->find("description")->text, "Files.\n\nRead one.");
  const auto& m = r->messages.items;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[1].find("role")->text, "user");  // developer -> user
  EXPECT_EQ(m[3].find("role")->text, "assistant");
  EXPECT_EQ(m[3].find("content")->text, "working");
  EXPECT_EQ(m[3].find("reasoning_content")->text, "plan");
  // Calls sorted by call_id; the custom call's input becomes {"input": ...}.
  EXPECT_EQ(m[3].find("tool_calls")->items[0].find("id")->text, "a");
  EXPECT_EQ(m[3].find("tool_calls")->items[0].find("function")->find("arguments")->text,
            "{\"input\": \"*** Begin Patch\"}");
  EXPECT_EQ(m[4].find("tool_call_id")->text, "a");
  std::string p = render_api(*r, PromptFormat::kV41)->to_string();
  EXPECT_NE(p.find("\"name\": \"fs::read\""), std::string::npos);
  EXPECT_NE(p.find("<｜User｜><tool_result>A</tool_result>\n\n<tool_result>B</"
                   "tool_result><｜Assistant｜></think>"),
            std::string::npos)
      << p;
}

TEST(ResponsesResponder, StreamEventsAndFinalObject) {
  using K = prompt::ParserEvent::Kind;
  prompt::ParserEvent b{K::kToolCallBegin, "fs::read"}, a{K::kToolArguments, "{}"},
      e{K::kToolCallEnd, ""}, f{K::kFinish, ""};
  b.tool_index = a.tool_index = e.tool_index = 0;
  f.finish = prompt::FinishReason::kToolCalls;
  std::vector<prompt::ParserEvent> ev = {{K::kReasoning, "r"}, {K::kContent, "ok"}, b, a, e, f};
  Usage u{10, 5, 4};
  ResponsesResponder s("x1", "deepseek", 1);
  std::string sse = s.stream(ev, u);
  std::vector<std::string> types;
  nlohmann::json last;
  size_t pos = 0;
  int seq = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t end = sse.find("\n\n", pos);
    auto j = nlohmann::json::parse(sse.substr(pos + 6, end - pos - 6));
    types.push_back(j["type"]);
    EXPECT_EQ(j["sequence_number"], seq++);
    last = j;
    pos = end;
  }
  EXPECT_EQ(types.front(), "response.created");
  EXPECT_EQ(types[1], "response.in_progress");
  EXPECT_EQ(types.back(), "response.completed");
  EXPECT_NE(std::find(types.begin(), types.end(), "response.reasoning_text.delta"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "response.function_call_arguments.done"),
            types.end());
  const auto& out = last["response"]["output"];
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1]["phase"], "commentary");
  EXPECT_EQ(out[2]["type"], "function_call");
  EXPECT_EQ(out[2]["name"], "read");
  EXPECT_EQ(out[2]["namespace"], "fs");
  EXPECT_EQ(out[2]["call_id"], "call_x1_0");
  EXPECT_EQ(last["response"]["usage"]["input_tokens_details"]["cached_tokens"], 4);
  ResponsesResponder c("x1", "deepseek", 1);
  prompt::ParserEvent len{K::kFinish, ""};
  len.finish = prompt::FinishReason::kLength;
  c.add({{K::kContent, "part"}, len});
  auto full = nlohmann::json::parse(c.complete(u));
  EXPECT_EQ(full["status"], "incomplete");
  EXPECT_EQ(full["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(full["output"][0]["content"][0]["text"], "part");
  EXPECT_EQ(full["output"][0]["phase"], "final_answer");
}

}  // namespace
}  // namespace fathom::api
