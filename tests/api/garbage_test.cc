// Every request reader fed garbage: each prefix of a valid body, each body with one byte
// flipped, and deeply nested or oversized JSON. A reader may accept a mutated body that is
// still valid, but it must never crash, and every rejection is a client fault (400 in the
// protocol's error shape), never a 500.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "api/anthropic_messages.h"
#include "api/chat_completions.h"
#include "api/completions.h"
#include "api/errors.h"
#include "api/openai_responses.h"

namespace fathom::api {
namespace {

using Reader = std::function<Status(std::string_view)>;

struct Protocol {
  const char* name;
  std::string body;
  Reader read;
};

std::vector<Protocol> protocols() {
  return {
      {"chat",
       R"({"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"temperature":0.7,"n":2,"logprobs":true,"top_logprobs":3,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"stop":["x"]})",
       [](std::string_view b) {
         auto r = parse_chat_request(b, {});
         return r.is_ok() ? Status::ok() : r.status();
       }},
      {"completions",
       R"({"model":"m","prompt":[1,2,3],"max_tokens":5,"logprobs":2,"n":2,"best_of":2,"stop":"\n","stream":true,"stream_options":{"include_usage":true}})",
       [](std::string_view b) {
         auto r = parse_completions_request(b, {});
         return r.is_ok() ? Status::ok() : r.status();
       }},
      {"messages",
       R"({"model":"m","max_tokens":4096,"system":"s","thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}]})",
       [](std::string_view b) {
         auto r = parse_messages_request(b, {});
         return r.is_ok() ? Status::ok() : r.status();
       }},
      {"responses",
       R"({"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"reasoning":{"effort":"low"}})",
       [](std::string_view b) {
         auto r = parse_responses_request(b, {});
         return r.is_ok() ? Status::ok() : r.status();
       }},
  };
}

void expect_client_fault(const Status& s, const std::string& body, const char* name) {
  if (s.is_ok()) return;
  EXPECT_EQ(http_status_of(s), 400) << name << ": " << s.message() << "\nbody: " << body;
  auto e = nlohmann::json::parse(openai_error_json(s));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
}

TEST(Garbage, ValidBodiesAreAccepted) {
  for (const Protocol& p : protocols()) {
    Status s = p.read(p.body);
    EXPECT_TRUE(s.is_ok()) << p.name << ": " << s.message();
  }
}

TEST(Garbage, PrefixesAndFlippedBytesAreClientFaults) {
  std::mt19937 rng(7);
  for (const Protocol& p : protocols()) {
    for (size_t n = 0; n < p.body.size(); ++n) {
      std::string prefix = p.body.substr(0, n);
      Status s = p.read(prefix);
      EXPECT_FALSE(s.is_ok()) << p.name << " accepted a prefix: " << prefix;
      expect_client_fault(s, prefix, p.name);
    }
    for (int i = 0; i < 2000; ++i) {
      std::string mutated = p.body;
      mutated[rng() % mutated.size()] = char(rng() % 256);
      expect_client_fault(p.read(mutated), mutated, p.name);
    }
  }
}

TEST(Garbage, DeepNestingAndWrongTypes) {
  std::string deep = std::string(200, '[') + std::string(200, ']');
  for (const Protocol& p : protocols()) {
    for (const std::string& b :
         {deep, std::string("null"), std::string("\"x\""), std::string("{}"),
          std::string(R"({"messages":{},"prompt":{},"input":7,"max_tokens":"x"})")}) {
      Status s = p.read(b);
      EXPECT_FALSE(s.is_ok()) << p.name << " accepted: " << b.substr(0, 80);
      expect_client_fault(s, b.substr(0, 80), p.name);
    }
  }
}

}  // namespace
}  // namespace fathom::api
