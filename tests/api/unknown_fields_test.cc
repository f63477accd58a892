// A request field that the protocol does not define is a 400 naming it (OpenAI's "Unrecognized
// request argument supplied", Anthropic's "Extra inputs are not permitted"), never silently
// dropped; every field the official clients can send (tests/data/api/sdk_request_fields.json,
// read from the openai and @anthropic-ai/sdk type declarations) is known to the adapter: it is
// honoured, or rejected with a message of its own. A body with very many members parses in
// linear time. The parameter objects inside a request are checked the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "api/anthropic_messages.h"
#include "api/chat_completions.h"
#include "api/completions.h"
#include "api/errors.h"
#include "api/openai_responses.h"
#include "api/tokenize.h"

namespace fathom::api {
namespace {

using nlohmann::json;

struct Protocol {
  const char* name;  // the key in sdk_request_fields.json
  std::string base;  // a valid request body without its closing brace
  bool anthropic;    // Anthropic's error shape and wording
  std::function<Status(const std::string&, std::span<const std::string_view>)> parse;
};

std::vector<Protocol> protocols() {
  return {
      {"chat", R"({"model":"m","messages":[{"role":"user","content":"hi"}])", false,
       [](const std::string& b, std::span<const std::string_view> extra) {
         ChatOptions o;
         o.caller_fields = extra;
         return parse_chat_request(b, o).status();
       }},
      {"completions", R"({"model":"m","prompt":"hi")", false,
       [](const std::string& b, std::span<const std::string_view> extra) {
         CompletionsOptions o;
         o.caller_fields = extra;
         return parse_completions_request(b, o).status();
       }},
      {"responses", R"({"model":"m","input":"hi")", false,
       [](const std::string& b, std::span<const std::string_view> extra) {
         ResponsesOptions o;
         o.caller_fields = extra;
         return parse_responses_request(b, o).status();
       }},
      {"messages", R"({"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}])",
       true,
       [](const std::string& b, std::span<const std::string_view> extra) {
         MessagesOptions o;
         o.caller_fields = extra;
         return parse_messages_request(b, o).status();
       }},
  };
}

bool says_unknown(const Status& s) {
  const std::string& m = s.message();
  return m.find("Unrecognized request argument") != std::string::npos ||
         m.find("Extra inputs are not permitted") != std::string::npos;
}

// The error body the client gets, in the protocol's shape.
json error_of(const Protocol& p, const Status& s) {
  json e = json::parse(p.anthropic ? anthropic_error_json(s) : openai_error_json(s))["error"];
  EXPECT_EQ(p.anthropic ? anthropic_http_status_of(s) : http_status_of(s), 400) << s.message();
  EXPECT_EQ(e["type"], "invalid_request_error");
  return e;
}

TEST(UnknownFields, AreA400NamingTheField) {
  for (const Protocol& p : protocols()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(p.parse(p.base + "}", {}).is_ok()) << p.parse(p.base + "}", {}).message();
    for (const char* f : {"max_tokenz", "temprature", "x-custom", "extra_body"}) {
      Status s = p.parse(p.base + ",\"" + f + "\":1}", {});
      ASSERT_FALSE(s.is_ok()) << f;
      EXPECT_TRUE(says_unknown(s)) << s.message();
      json e = error_of(p, s);
      // OpenAI's error names the field in `param`; Anthropic's has no param and starts with it.
      if (p.anthropic) {
        EXPECT_EQ(std::string(e["message"]).rfind(std::string(f) + ": ", 0), 0u) << s.message();
      } else if (std::string_view(f) != "x-custom") {
        EXPECT_EQ(e["param"], f) << s.message();
      }
      EXPECT_NE(std::string(e["message"]).find(f), std::string::npos) << s.message();
    }
    // Whatever its value, null included (as OpenAI's and Anthropic's APIs answer).
    EXPECT_TRUE(says_unknown(p.parse(p.base + R"(,"no_such_field":null})", {})));
    // A long name is shown cut (at a character boundary); a name with a quote is not taken
    // for a shorter param.
    const std::string long_name = std::string(63, 'x') + "\u00e9" + std::string(100000, 'y');
    Status cut = p.parse(p.base + ",\"" + long_name + "\":1}", {});
    EXPECT_TRUE(says_unknown(cut));
    EXPECT_LT(cut.message().size(), 200u);
    EXPECT_NE(cut.message().find(std::string(63, 'x') + "..."), std::string::npos) << cut.message();
    json quoted = error_of(p, p.parse(p.base + R"(,"a'b":1})", {}));
    if (!p.anthropic) {
      EXPECT_TRUE(quoted["param"].is_null()) << quoted.dump();
    }
    EXPECT_NE(std::string(quoted["message"]).find("a'b"), std::string::npos);
    // The first unknown field is named, whatever follows.
    Status s = p.parse(p.base + R"(,"first_unknown":[],"second_unknown":{}})", {});
    EXPECT_NE(s.message().find("first_unknown"), std::string::npos) << s.message();
    // Fields the caller reads itself (the server's test hooks) are not reported.
    constexpr std::string_view kHook[] = {"forced_output_ids"};
    EXPECT_TRUE(p.parse(p.base + R"(,"forced_output_ids":[1,2]})", kHook).is_ok());
    EXPECT_TRUE(says_unknown(p.parse(p.base + R"(,"forced_output_ids":[1,2]})", {})));
  }
}

// The token-count endpoints (POST /v1/responses/input_tokens, /v1/messages/count_tokens):
// `create` names the generation request of the same API in sdk_request_fields.json.
struct TokenCount {
  const char* name;
  const char* create;
  std::string base;
  bool anthropic;
  std::function<Status(const std::string&)> parse;
};

std::vector<TokenCount> token_counts() {
  return {
      {"responses_input_tokens", "responses", R"({"model":"m","input":"hi")", false,
       [](const std::string& b) {
         ResponsesOptions o;
         o.input_tokens = true;
         return parse_responses_request(b, o).status();
       }},
      {"messages_count_tokens", "messages",
       R"({"model":"m","messages":[{"role":"user","content":"hi"}])", true,
       [](const std::string& b) {
         MessagesOptions o;
         o.count_tokens = true;
         return parse_messages_request(b, o).status();
       }},
  };
}

json sdk_fields() {
  std::ifstream in(std::string(FATHOM_TEST_DATA) + "/api/sdk_request_fields.json");
  EXPECT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

// Each count takes every field its official client sends, and no field that only the
// generation request has (max_tokens, stream, temperature, ...): that is a 400 naming it, as
// the APIs answer.
TEST(UnknownFields, TokenCountsTakeTheirClientsFieldsAndNoGenerationField) {
  const json sdk = sdk_fields();
  for (const TokenCount& c : token_counts()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.parse(c.base + "}").is_ok()) << c.parse(c.base + "}").message();
    const json& count = sdk.at(c.name);
    ASSERT_GE(count.size(), 8u);
    for (const json& f : count) {
      const std::string name = f;
      for (const char* value : {"1", "\"x\"", "true", "{}", "[]"}) {
        Status s = c.parse(c.base + ",\"" + name + "\":" + value + "}");
        EXPECT_FALSE(says_unknown(s)) << name << ": " << s.message();
      }
    }
    int generation_only = 0;
    for (const json& f : sdk.at(c.create)) {
      const std::string name = f;
      if (std::find(count.begin(), count.end(), f) != count.end()) continue;
      ++generation_only;
      Status s = c.parse(c.base + ",\"" + name + "\":1}");
      EXPECT_TRUE(says_unknown(s)) << name << ": " << s.message();
      EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
      EXPECT_EQ(c.anthropic ? anthropic_http_status_of(s) : http_status_of(s), 400);
    }
    EXPECT_GE(generation_only, 5) << "max_tokens, stream, ...";
  }
}

// vLLM's POST /tokenize takes the fields of its TokenizeCompletionRequest (a prompt) or
// TokenizeChatRequest (a conversation), as vllm/entrypoints/serve/tokenize/protocol.py
// defines them, and nothing else: a generation field is a 400 naming it.
TEST(UnknownFields, TokenizeTakesVllmsFieldsAndNoGenerationField) {
  const std::string prompt = R"({"model":"m","prompt":"hi")";
  const std::string chat = R"({"model":"m","messages":[{"role":"user","content":"hi"}])";
  auto parse = [](const std::string& b) {
    return parse_tokenize_request(b, ChatOptions{}).status();
  };
  ASSERT_TRUE(parse(prompt + "}").is_ok());
  ASSERT_TRUE(parse(chat + "}").is_ok());
  for (const char* f : {"model", "prompt", "add_special_tokens", "return_token_strs"})
    for (const char* value : {"1", "\"x\"", "true", "{}", "[]"})
      EXPECT_FALSE(says_unknown(parse(prompt + ",\"" + f + "\":" + value + "}"))) << f;
  for (const char* f : {"model", "messages", "add_generation_prompt", "return_token_strs",
                        "continue_final_message", "add_special_tokens", "chat_template",
                        "chat_template_kwargs", "media_io_kwargs", "mm_processor_kwargs", "tools"})
    for (const char* value : {"1", "\"x\"", "true", "{}", "[]"})
      EXPECT_FALSE(says_unknown(parse(chat + ",\"" + f + "\":" + value + "}"))) << f;
  for (const char* f : {"max_tokens", "temperature", "stream", "n", "seed", "messages_x"}) {
    for (const std::string& base : {prompt, chat}) {
      Status s = parse(base + ",\"" + f + "\":1}");
      EXPECT_TRUE(says_unknown(s)) << f << ": " << s.message();
      EXPECT_EQ(json::parse(openai_error_json(s))["error"]["param"], f);
    }
  }
  // /detokenize: vLLM's DetokenizeRequest (model, tokens).
  auto detok = [](const std::string& b) { return parse_detokenize_request(b, ChatOptions{}); };
  EXPECT_EQ(*detok(R"({"model":"m","tokens":[1,2]})"), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(says_unknown(detok(R"({"tokens":[1],"skip_special_tokens":true})").status()));
  EXPECT_FALSE(detok(R"({"tokens":[-1]})").is_ok());
  EXPECT_FALSE(detok(R"({"tokens":[1.5]})").is_ok());
  // vLLM's defaults: add_special_tokens true for a prompt, false for a conversation.
  EXPECT_TRUE(parse_tokenize_request(prompt + "}", {})->add_special_tokens);
  EXPECT_FALSE(
      parse_tokenize_request(prompt + R"(,"add_special_tokens":false})", {})->add_special_tokens);
  auto c = parse_tokenize_request(chat + R"(,"return_token_strs":true})", {});
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE(c->chat.has_value());
  EXPECT_TRUE(c->return_token_strs);
  EXPECT_FALSE(c->add_special_tokens);
}

TEST(UnknownFields, EveryFieldOfTheOfficialClientsIsKnown) {
  const json sdk = sdk_fields();
  for (const Protocol& p : protocols()) {
    const json& fields = sdk.at(p.name);
    ASSERT_GT(fields.size(), 10u) << p.name;
    for (const json& f : fields) {
      const std::string name = f;
      // Each value shape a client might send: the adapter may honour it or reject it with its
      // own message, but never call the field unknown.
      for (const char* value : {"1", "\"x\"", "true", "{}", "[]"}) {
        Status s = p.parse(p.base + ",\"" + name + "\":" + value + "}", {});
        EXPECT_FALSE(says_unknown(s)) << p.name << " " << name << ": " << s.message();
      }
    }
  }
}

// The parameter objects inside a request (stream_options, thinking, tools, tool_choice,
// response_format, metadata, text, reasoning): a member the protocol does not define is a 400
// naming its path, and every member the official clients declare for them
// (sdk_request_fields.json "nested", read from their type declarations) is known: honoured, or
// rejected with a message of its own.
TEST(UnknownFields, NestedParameterObjectsNameTheirUnknownMembers) {
  std::map<std::string, const Protocol*> by_name;
  const std::vector<Protocol> ps = protocols();
  for (const Protocol& p : ps) by_name[p.name] = &p;
  // "protocol path" -> the request's members with the object; '@' is where a member goes.
  const std::map<std::string, std::string> bodies = {
      {"chat stream_options", R"("stream":true,"stream_options":{"include_usage":true@})"},
      {"completions stream_options", R"("stream":true,"stream_options":{"include_usage":true@})"},
      {"chat thinking", R"("thinking":{"type":"enabled"@})"},
      {"chat tools[0]", R"("tools":[{"type":"function","function":{"name":"f"}@}])"},
      {"chat tool_choice",
       R"("thinking":{"type":"disabled"},"tools":[{"type":"function","function":{"name":"f"}}],)"
       R"("tool_choice":{"type":"function","function":{"name":"f"}@})"},
      {"chat tool_choice.function",
       R"("thinking":{"type":"disabled"},"tools":[{"type":"function","function":{"name":"f"}}],)"
       R"("tool_choice":{"type":"function","function":{"name":"f"@}})"},
      {"chat response_format",
       R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}@})"},
      {"chat response_format.json_schema",
       R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}@}})"},
      {"messages thinking", R"("thinking":{"type":"adaptive"@})"},
      {"messages tool_choice",
       R"("tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"@})"},
      {"messages metadata", R"("metadata":{"user_id":"u"@})"},
      {"messages tools.0", R"("tools":[{"name":"f","input_schema":{"type":"object"}@}])"},
      {"responses text", R"("text":{"format":{"type":"text"}@})"},
      {"responses reasoning", R"("reasoning":{"effort":"low"@})"},
  };
  auto request = [&](const Protocol& p, const std::string& body, const std::string& member) {
    std::string b = body;
    b.replace(b.find('@'), 1, member);
    return p.parse(p.base + "," + b + "}", {});
  };
  const json nested = sdk_fields().at("nested");
  ASSERT_EQ(nested.size(), bodies.size());
  for (const auto& [key, members] : nested.items()) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(bodies.count(key)) << "no request for " << key;
    const std::string& body = bodies.at(key);
    const Protocol& p = *by_name.at(key.substr(0, key.find(' ')));
    const std::string path = key.substr(key.find(' ') + 1);
    Status ok = request(p, body, "");
    ASSERT_TRUE(ok.is_ok()) << ok.message();
    Status s = request(p, body, R"(,"bogus_member":1)");
    ASSERT_FALSE(s.is_ok());
    EXPECT_TRUE(says_unknown(s)) << s.message();
    json e = error_of(p, s);
    if (p.anthropic) {
      EXPECT_EQ(std::string(e["message"]).rfind(path + ".bogus_member: ", 0), 0u) << s.message();
    } else {
      EXPECT_EQ(e["param"], path + ".bogus_member") << s.message();
    }
    ASSERT_GE(members.size(), 1u);
    for (const json& m : members)
      for (const char* value : {"1", "\"x\"", "true", "false", "null", "{}", "[]"}) {
        Status v = request(p, body, ",\"" + std::string(m) + "\":" + value);
        EXPECT_FALSE(says_unknown(v)) << std::string(m) << "=" << value << ": " << v.message();
      }
  }
  // What those members do here: the value this server implements is taken, another is a 400
  // saying so.
  const Protocol& chat = *by_name.at("chat");
  const Protocol& messages = *by_name.at("messages");
  const std::string so = bodies.at("chat stream_options");
  EXPECT_TRUE(request(chat, so, R"(,"include_obfuscation":false)").is_ok());
  EXPECT_NE(request(chat, so, R"(,"include_obfuscation":true)").message().find("not supported"),
            std::string::npos);
  EXPECT_TRUE(request(chat, so, R"(,"continuous_usage_stats":true)").is_ok());  // vLLM's
  const std::string th = bodies.at("messages thinking");
  EXPECT_TRUE(request(messages, th, R"(,"display":"summarized")").is_ok());
  EXPECT_FALSE(request(messages, th, R"(,"display":"omitted")").is_ok());
  const std::string tool = bodies.at("messages tools.0");
  for (const char* good : {R"(,"eager_input_streaming":true)", R"(,"defer_loading":false)",
                           R"(,"allowed_callers":["direct"])", R"(,"input_examples":[])",
                           R"(,"cache_control":{"type":"ephemeral"})", R"(,"type":"custom")"})
    EXPECT_TRUE(request(messages, tool, good).is_ok()) << good;
  for (const char* refused :
       {R"(,"defer_loading":true)", R"(,"allowed_callers":["code_execution_20250825"])",
        R"(,"input_examples":[{"a":1}])"}) {
    Status s = request(messages, tool, refused);
    EXPECT_FALSE(s.is_ok()) << refused;
    EXPECT_NE(s.message().find("supported by this server"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace fathom::api
