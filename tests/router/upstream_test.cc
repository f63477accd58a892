// The router's upstream protocols (router/upstream.h): the request each kind sends (fields
// as vLLM's and SGLang's docs name them, continuation on the prompt where there is no resume
// field), and the readers of the streamed answers fed well-formed streams in each documented
// shape and garbage — a malformed or truncated answer is an error, never a finish. Then the
// RemoteGenerator against a scripted upstream on loopback: a broken answer ends the client's
// stream with an error event.
#include "router/upstream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "api/structured_output.h"
#include "core/py_json.h"
#include "grammar/grammar_cache.h"
#include "request_head.h"
#include "router/remote_generator.h"

namespace fathom::router {
namespace {

using engine::FinishCause;
using pyjson::Value;
using Update = UpstreamStreamReader::Update;

engine::GenerationRequest request() {
  engine::GenerationRequest g;
  g.prompt = {5, 6, 7};
  g.max_tokens = 10;
  g.sampling.temperature = 0.5f;
  g.sampling.top_p = 0.9f;
  g.sampling.top_k = 4;
  g.sampling.seed = 42;
  g.seeded = true;
  g.sampling.presence_penalty = 0.25f;
  g.cache_salt = 0xabc;
  return g;
}

Value body_of(const UpstreamCall& c) {
  auto v = pyjson::parse(c.body);
  EXPECT_TRUE(v.is_ok());
  return v.is_ok() ? *v : Value();
}

std::vector<int64_t> ints(const Value* v) {
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  for (const Value& x : v->items) {
    int64_t i = 0;
    EXPECT_TRUE(x.int_fits_int64(&i));
    out.push_back(i);
  }
  return out;
}

int64_t int_of(const Value* v) {
  int64_t i = -1;
  if (v) {
    EXPECT_TRUE(v->int_fits_int64(&i));
  }
  return i;
}

TEST(UpstreamKind, Names) {
  for (const char* n : {"fathom", "vllm", "sglang"})
    EXPECT_STREQ(upstream_kind_name(*parse_upstream_kind(n)), n);
  EXPECT_FALSE(parse_upstream_kind("trtllm").is_ok());
  EXPECT_FALSE(parse_upstream_kind("").is_ok());
}

TEST(UpstreamCall, FathomSendsItsOwnFields) {
  const std::vector<int32_t> sofar = {8, 9};
  const UpstreamCall c =
      build_upstream_call(UpstreamKind::kFathom, request(), 1, sofar, "chat", "rid-1");
  EXPECT_EQ(c.path, "/v1/completions");
  const Value b = body_of(c);
  EXPECT_EQ(ints(b.find("prompt")), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(ints(b.find("resume_output_ids")), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(int_of(b.find("max_tokens")), 10);
  EXPECT_EQ(b.find("retention")->text, "chat");
  EXPECT_EQ(b.find("cache_salt")->text, "fathom-router-0000000000000abc");
  EXPECT_TRUE(b.find("return_token_ids")->boolean);
}

TEST(UpstreamCall, VllmContinuesOnThePromptWithVllmFieldsOnly) {
  const std::vector<int32_t> sofar = {8, 9};
  const UpstreamCall c =
      build_upstream_call(UpstreamKind::kVllm, request(), 1, sofar, "chat", "rid-1");
  EXPECT_EQ(c.path, "/v1/completions");
  const Value b = body_of(c);
  EXPECT_EQ(ints(b.find("prompt")), (std::vector<int64_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(int_of(b.find("max_tokens")), 8);  // what the request has left
  EXPECT_EQ(b.find("resume_output_ids"), nullptr);
  EXPECT_EQ(b.find("retention"), nullptr);
  EXPECT_EQ(b.find("cache_salt")->text, "fathom-router-0000000000000abc");  // vLLM >= 0.9
  EXPECT_EQ(int_of(b.find("seed")), 42);
  EXPECT_EQ(int_of(b.find("top_k")), 4);
  EXPECT_DOUBLE_EQ(b.find("presence_penalty")->number, 0.25);
  EXPECT_TRUE(b.find("stream")->boolean);
  EXPECT_TRUE(b.find("stream_options")->find("include_usage")->boolean);
  EXPECT_TRUE(b.find("return_token_ids")->boolean);
  EXPECT_EQ(b.find("n"), nullptr);
  EXPECT_EQ(
      int_of(body_of(build_upstream_call(UpstreamKind::kVllm, request(), 3, {}, "", "")).find("n")),
      3);
}

TEST(UpstreamCall, SglangGenerateShape) {
  const std::vector<int32_t> sofar = {8};
  const UpstreamCall c =
      build_upstream_call(UpstreamKind::kSglang, request(), 1, sofar, "chat", "rid-7");
  EXPECT_EQ(c.path, "/generate");
  const Value b = body_of(c);
  EXPECT_EQ(ints(b.find("input_ids")), (std::vector<int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(b.find("rid")->text, "rid-7");
  EXPECT_TRUE(b.find("stream")->boolean);
  EXPECT_EQ(b.find("extra_key")->text, "fathom-router-0000000000000abc");
  EXPECT_EQ(b.find("prompt"), nullptr);
  EXPECT_EQ(b.find("retention"), nullptr);
  const Value* sp = b.find("sampling_params");
  ASSERT_NE(sp, nullptr);
  EXPECT_EQ(int_of(sp->find("max_new_tokens")), 9);
  EXPECT_EQ(int_of(sp->find("sampling_seed")), 42);
  EXPECT_EQ(int_of(sp->find("top_k")), 4);
  EXPECT_DOUBLE_EQ(sp->find("temperature")->number, 0.5);
  EXPECT_FALSE(check_upstream_supports(UpstreamKind::kSglang, request(), 2).is_ok());
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kVllm, request(), 2).is_ok());
}

// One choice of an n-sample request continued alone: on fathom an n = 1 body with that
// choice's ids as resume_output_ids and its sample_index (omitted for choice 0, whose body is
// a plain single-sample continuation's, byte for byte).
TEST(UpstreamCall, FathomContinuesOneChoiceWithItsSampleIndex) {
  const std::vector<int32_t> sofar = {8, 9};
  const Value b =
      body_of(build_upstream_call(UpstreamKind::kFathom, request(), 3, sofar, "chat", "r", 2));
  EXPECT_EQ(b.find("n"), nullptr);
  EXPECT_EQ(int_of(b.find("sample_index")), 2);
  EXPECT_EQ(ints(b.find("resume_output_ids")), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(int_of(b.find("max_tokens")), 10);  // resume_output_ids count toward it
  EXPECT_EQ(int_of(b.find("seed")), 42);
  EXPECT_EQ(ints(b.find("prompt")), (std::vector<int64_t>{5, 6, 7}));
  // Before the choice's first token (a retry of that choice alone): no resume field.
  const Value first =
      body_of(build_upstream_call(UpstreamKind::kFathom, request(), 3, {}, "chat", "r", 1));
  EXPECT_EQ(first.find("resume_output_ids"), nullptr);
  EXPECT_EQ(int_of(first.find("sample_index")), 1);
  EXPECT_EQ(first.find("n"), nullptr);
  // Choice 0 of n, a plain single-sample continuation and the default argument: one body.
  const std::string single =
      build_upstream_call(UpstreamKind::kFathom, request(), 1, sofar, "chat", "r").body;
  EXPECT_EQ(build_upstream_call(UpstreamKind::kFathom, request(), 3, sofar, "chat", "r", 0).body,
            single);
  EXPECT_EQ(build_upstream_call(UpstreamKind::kFathom, request(), 1, sofar, "chat", "r", 0).body,
            single);
  EXPECT_EQ(body_of(build_upstream_call(UpstreamKind::kFathom, request(), 1, sofar, "", ""))
                .find("sample_index"),
            nullptr);
  // All n choices at once: `n`, never a sample_index.
  const Value all = body_of(build_upstream_call(UpstreamKind::kFathom, request(), 3, {}, "", ""));
  EXPECT_EQ(int_of(all.find("n")), 3);
  EXPECT_EQ(all.find("sample_index"), nullptr);
  // A single-sample request's own sample_index (a client's, through the router) goes on, on a
  // first try and on a continuation alike.
  engine::GenerationRequest own = request();
  own.sample_index = 5;
  EXPECT_EQ(int_of(body_of(build_upstream_call(UpstreamKind::kFathom, own, 1, {}, "", ""))
                       .find("sample_index")),
            5);
  EXPECT_EQ(int_of(body_of(build_upstream_call(UpstreamKind::kFathom, own, 1, sofar, "", "", 0))
                       .find("sample_index")),
            5);
}

// On vllm one choice continues as n = 1 with its ids on the prompt and the request's seed
// (vLLM cannot select a sample's random numbers); a client's sample_index is refused there.
TEST(UpstreamCall, VllmContinuesOneChoiceOnThePrompt) {
  const std::vector<int32_t> sofar = {8, 9, 10};
  const Value b =
      body_of(build_upstream_call(UpstreamKind::kVllm, request(), 3, sofar, "chat", "r", 2));
  EXPECT_EQ(ints(b.find("prompt")), (std::vector<int64_t>{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(int_of(b.find("max_tokens")), 7);
  EXPECT_EQ(b.find("n"), nullptr);
  EXPECT_EQ(int_of(b.find("seed")), 42);
  EXPECT_EQ(b.find("sample_index"), nullptr);
  EXPECT_EQ(b.find("resume_output_ids"), nullptr);
  EXPECT_EQ(build_upstream_call(UpstreamKind::kVllm, request(), 3, sofar, "chat", "r", 0).body,
            build_upstream_call(UpstreamKind::kVllm, request(), 1, sofar, "chat", "r").body);
  // sglang has only choice 0 of one sample: the same body as without a choice.
  EXPECT_EQ(build_upstream_call(UpstreamKind::kSglang, request(), 1, sofar, "", "r", 0).body,
            build_upstream_call(UpstreamKind::kSglang, request(), 1, sofar, "", "r").body);
  engine::GenerationRequest own = request();
  own.sample_index = 1;
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kFathom, own, 1).is_ok());
  for (UpstreamKind k : {UpstreamKind::kVllm, UpstreamKind::kSglang}) {
    const Status s = check_upstream_supports(k, own, 1);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << upstream_kind_name(k);
    EXPECT_EQ(s.message().rfind("'sample_index'", 0), 0u) << s.message();
  }
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kVllm, request(), 3).is_ok());
}

// Feeds `lines` to a reader; the tokens per choice, the finishes, and the first error.
struct Read {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<FinishCause> cause;
  Status status;
  bool done = false;
};
Read read(UpstreamKind kind, const std::vector<std::string>& lines, int n = 1,
          std::vector<int32_t> prompt = {5, 6, 7}, std::optional<int64_t>* cached = nullptr) {
  UpstreamStreamReader r(kind, n, 1000, prompt);
  Read out;
  out.tokens.resize(size_t(n));
  out.cause.assign(size_t(n), FinishCause::kNone);
  for (const std::string& l : lines) {
    std::vector<Update> ups;
    out.status = r.feed(l, &ups);
    for (Update& u : ups) {
      out.tokens[u.choice].insert(out.tokens[u.choice].end(), u.tokens.begin(), u.tokens.end());
      if (u.cause != FinishCause::kNone) out.cause[u.choice] = u.cause;
    }
    if (!out.status.is_ok()) break;
  }
  out.done = r.done();
  if (cached) *cached = r.cached_tokens();
  return out;
}

// vLLM's stream with return_token_ids (serving_completion.py): prompt_token_ids on the first
// chunk of each choice (null after), token_ids on every chunk, a usage chunk, [DONE].
const std::vector<std::string> kVllm = {
    R"(data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[5,6,7],"token_ids":[11]}],"usage":null})",
    "",
    R"(data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"bc","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":[12,13]}],"usage":null})",
    "",
    R"(data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,"token_ids":[]}],"usage":null})",
    R"(data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":2}}})",
    "data: [DONE]"};

TEST(UpstreamReader, VllmStream) {
  std::optional<int64_t> cached;
  const Read r = read(UpstreamKind::kVllm, kVllm, 1, {5, 6, 7}, &cached);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  EXPECT_EQ(r.tokens[0], (std::vector<int32_t>{11, 12, 13}));
  EXPECT_EQ(r.cause[0], FinishCause::kLength);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(cached, std::optional<int64_t>(2));
}

TEST(UpstreamReader, VllmTwoChoicesInterleaved) {
  const Read r = read(
      UpstreamKind::kVllm,
      {R"(data: {"choices":[{"index":1,"token_ids":[3],"finish_reason":null}]})",
       R"(data: {"choices":[{"index":0,"token_ids":[4],"finish_reason":"stop"}]})",
       R"(data: {"choices":[{"index":1,"token_ids":[5],"finish_reason":"stop"}]})", "data: [DONE]"},
      2);
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  EXPECT_EQ(r.tokens[0], (std::vector<int32_t>{4}));
  EXPECT_EQ(r.tokens[1], (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(r.cause[0], FinishCause::kEos);
}

// Each line after a good first chunk, and what the error must say.
TEST(UpstreamReader, VllmGarbageIsAnError) {
  const std::string first =
      R"(data: {"choices":[{"index":0,"token_ids":[1],"finish_reason":null}]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"data: {not json", "not a JSON object"},
      {"data: [1,2]", "not a JSON object"},
      {R"(data: {"choices":{}})", "'choices' is not a list"},
      {R"(data: {"choices":[{"index":0,"text":"no ids"}]})", "'token_ids' is not a list"},
      {R"(data: {"choices":[{"index":0,"token_ids":[1.5]}]})", "non-integer"},
      {R"(data: {"choices":[{"index":0,"token_ids":[1000]}]})", "outside the vocabulary"},
      {R"(data: {"choices":[{"index":0,"token_ids":[-1]}]})", "outside the vocabulary"},
      {R"(data: {"choices":[{"index":3,"token_ids":[1]}]})", "index"},
      {R"(data: {"choices":[{"token_ids":[1]}]})", "index"},
      {R"(data: {"choices":[{"index":0,"token_ids":[],"finish_reason":"abort"}]})",
       "finish_reason 'abort'"},
      {R"(data: {"choices":[{"index":0,"token_ids":[],"finish_reason":7}]})", "not a string"},
      {R"(data: {"choices":[{"index":0,"token_ids":[1],"prompt_token_ids":[5,6]}]})",
       "differ from the prompt"},
      {R"(data: {"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":"x"}}})",
       "cached_tokens"},
      {R"(data: {"choices":[],"usage":7})", "'usage'"},
  };
  for (const auto& [line, why] : cases) {
    const Read r = read(UpstreamKind::kVllm, {first, line});
    EXPECT_EQ(r.status.code(), StatusCode::kCorrupt) << line;
    EXPECT_NE(r.status.message().find(why), std::string::npos)
        << line << " -> " << r.status.message();
    EXPECT_EQ(r.cause[0], FinishCause::kNone) << line;
  }
  // Tokens after the finish, a second finish, anything after [DONE].
  const std::string fin =
      R"(data: {"choices":[{"index":0,"token_ids":[],"finish_reason":"stop"}]})";
  EXPECT_EQ(
      read(UpstreamKind::kVllm, {first, fin, R"(data: {"choices":[{"index":0,"token_ids":[2]}]})"})
          .status.code(),
      StatusCode::kCorrupt);
  EXPECT_EQ(read(UpstreamKind::kVllm, {first, fin, fin}).status.code(), StatusCode::kCorrupt);
  EXPECT_EQ(read(UpstreamKind::kVllm, {first, fin, "data: [DONE]", first}).status.code(),
            StatusCode::kCorrupt);
}

// An error event is the upstream's fault (kIoError: the attempt fails and another replica
// may continue) unless it blames the request, as OpenAI's, Fathom's and vLLM's error shapes
// can (kInvalidArgument: the client gets the error, the replica stays up).
TEST(UpstreamReader, ErrorEventsCarryTheUpstreamsMessage) {
  for (const std::string& line :
       {std::string(R"(data: {"error":{"message":"boom","type":"server_error","code":500}})"),
        std::string(R"(data: {"object":"error","message":"boom","type":"x","code":500})"),
        std::string(R"(data: {"error":{"message":"boom"}})"),
        std::string(R"(data: {"error":"boom"})")}) {
    const Read r = read(UpstreamKind::kVllm, {line});
    EXPECT_EQ(r.status.code(), StatusCode::kIoError) << line;
    EXPECT_EQ(r.status.message(), "boom");
    EXPECT_EQ(read(UpstreamKind::kSglang, {line}).status.code(), StatusCode::kIoError);
  }
  for (const std::string& line :
       {std::string(R"(data: {"error":{"message":"boom","type":"BadRequestError","code":400}})"),
        std::string(R"(data: {"error":{"message":"boom","type":"invalid_request_error",)"
                    R"("param":null,"code":"invalid_argument"}})"),
        std::string(R"(data: {"object":"error","message":"boom","type":"x","code":400})")}) {
    const Read r = read(UpstreamKind::kFathom, {line});
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << line;
    EXPECT_EQ(r.status.message(), "boom");
  }
}

// SGLang's /generate stream, default mode: each object's output_ids are all ids so far.
const std::vector<std::string> kSglangCumulative = {
    R"(data: {"text":"a","output_ids":[11],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":3,"completion_tokens":1,"cached_tokens":0}})",
    "",
    R"(data: {"text":null,"output_ids":[11,12,13],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":3,"completion_tokens":3,"cached_tokens":0}})",
    R"(data: {"text":"abcd","output_ids":[11,12,13,14],"meta_info":{"id":"r","finish_reason":{"type":"stop","matched":14},"prompt_tokens":3,"completion_tokens":4,"cached_tokens":2,"e2e_latency":0.1}})",
    "data: [DONE]"};
// The same with --incremental-streaming-output: each object holds only the new ids.
const std::vector<std::string> kSglangIncremental = {
    R"(data: {"text":"a","output_ids":[11],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":3,"completion_tokens":1,"cached_tokens":0}})",
    R"(data: {"text":"bc","output_ids":[12,13],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":3,"completion_tokens":3,"cached_tokens":0}})",
    R"(data: {"text":"d","output_ids":[14],"meta_info":{"id":"r","finish_reason":{"type":"stop","matched":14},"prompt_tokens":3,"completion_tokens":4,"cached_tokens":2}})",
    "data: [DONE]"};

TEST(UpstreamReader, SglangCumulativeAndIncrementalReadTheSame) {
  for (const auto* lines : {&kSglangCumulative, &kSglangIncremental}) {
    std::optional<int64_t> cached;
    const Read r = read(UpstreamKind::kSglang, *lines, 1, {5, 6, 7}, &cached);
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    EXPECT_EQ(r.tokens[0], (std::vector<int32_t>{11, 12, 13, 14}));
    EXPECT_EQ(r.cause[0], FinishCause::kEos);
    EXPECT_TRUE(r.done);
    EXPECT_EQ(cached, std::optional<int64_t>(2));
  }
  const Read len = read(
      UpstreamKind::kSglang,
      {R"(data: {"output_ids":[1],"meta_info":{"finish_reason":{"type":"length","length":1},"completion_tokens":1}})"});
  EXPECT_EQ(len.cause[0], FinishCause::kLength);
}

TEST(UpstreamReader, SglangGarbageIsAnError) {
  const std::string first =
      R"(data: {"text":"a","output_ids":[11],"meta_info":{"finish_reason":null,"prompt_tokens":3,"completion_tokens":1}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(data: {"output_ids":[11,12]})", "'meta_info'"},
      {R"(data: {"output_ids":[11,12],"meta_info":{}})", "completion_tokens"},
      {R"(data: {"meta_info":{"completion_tokens":2}})", "'output_ids' is not a list"},
      {R"(data: {"output_ids":[11,"x"],"meta_info":{"completion_tokens":2}})", "non-integer"},
      // Neither the output so far extended (cumulative) nor new ids adding up (incremental).
      {R"(data: {"output_ids":[99,12],"meta_info":{"completion_tokens":2}})", "do not extend"},
      {R"(data: {"output_ids":[12],"meta_info":{"completion_tokens":5}})", "do not extend"},
      {R"(data: {"output_ids":[12],"meta_info":{"completion_tokens":2,"prompt_tokens":9}})",
       "prompt_tokens"},
      {R"(data: {"output_ids":[12],"meta_info":{"completion_tokens":2,"finish_reason":"stop"}})",
       "finish_reason"},
      {R"(data: {"output_ids":[12],"meta_info":{"completion_tokens":2,"finish_reason":{"type":"eos"}}})",
       "type 'eos'"},
  };
  for (const auto& [line, why] : cases) {
    const Read r = read(UpstreamKind::kSglang, {first, line});
    EXPECT_EQ(r.status.code(), StatusCode::kCorrupt) << line;
    EXPECT_NE(r.status.message().find(why), std::string::npos)
        << line << " -> " << r.status.message();
    EXPECT_EQ(r.cause[0], FinishCause::kNone) << line;
  }
  const Read abort = read(
      UpstreamKind::kSglang,
      {first,
       R"(data: {"output_ids":[11],"meta_info":{"completion_tokens":1,"finish_reason":{"type":"abort","message":"out of memory","status_code":500}}})"});
  EXPECT_EQ(abort.status.code(), StatusCode::kIoError);
  EXPECT_NE(abort.status.message().find("out of memory"), std::string::npos);
}

// ---- the request features beyond sampling (logprobs, stop ids, reasoning budget, grammar) ----

std::shared_ptr<const grammar::GrammarSpec> spec_of(grammar::GrammarSpec::Kind kind,
                                                    std::string text,
                                                    std::vector<std::string> choices = {}) {
  grammar::GrammarSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.choices = std::move(choices);
  s.json.whitespace = grammar::JsonSchemaOptions::Whitespace::kCompact;
  s.json.strict_additional_properties = true;
  return std::make_shared<const grammar::GrammarSpec>(std::move(s));
}

// A request with every feature: 3 alternatives, stop ids, a budget of 100 ending with id 7,
// a JSON schema after the reasoning.
engine::GenerationRequest featured() {
  engine::GenerationRequest g = request();
  g.top_logprobs = 3;
  g.stop_ids = {40, 41};
  g.reasoning_budget = 100;
  g.think_end_id = 7;
  g.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kJsonSchema,
                           R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  g.grammar_after_think = true;
  return g;
}

TEST(UpstreamCall, FathomCarriesEachFeatureByIdAndTheGrammarsSource) {
  const Value plain = body_of(build_upstream_call(UpstreamKind::kFathom, request(), 1, {}, "", ""));
  for (const char* f : {"stop_token_ids", "logprob_ids", "reasoning_budget", "think_end_id",
                        "grammar_spec", "grammar_after_think", "logprobs"})
    EXPECT_EQ(plain.find(f), nullptr) << f;
  const Value b = body_of(build_upstream_call(UpstreamKind::kFathom, featured(), 1, {}, "", ""));
  EXPECT_EQ(ints(b.find("stop_token_ids")), (std::vector<int64_t>{40, 41}));
  EXPECT_EQ(int_of(b.find("logprob_ids")), 3);
  EXPECT_EQ(b.find("logprobs"), nullptr);  // never text-level logprobs
  EXPECT_EQ(int_of(b.find("reasoning_budget")), 100);
  EXPECT_EQ(int_of(b.find("think_end_id")), 7);
  EXPECT_TRUE(b.find("grammar_after_think")->boolean);
  EXPECT_TRUE(b.find("return_token_ids")->boolean);
  // The spec reads back equal: kind, text and the JSON options the router's server chose.
  auto spec = api::parse_grammar_spec(*b.find("grammar_spec"));
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  const engine::GenerationRequest f = featured();
  const grammar::GrammarSpec& want = *f.grammar_spec;
  EXPECT_EQ(spec->kind, want.kind);
  EXPECT_EQ(spec->text, want.text);
  EXPECT_EQ(spec->json.whitespace, want.json.whitespace);
  EXPECT_EQ(spec->json.strict_additional_properties, true);
  EXPECT_EQ(spec->json.max_whitespace, want.json.max_whitespace);
  // Every kind round-trips, choices included.
  for (const auto& s :
       {spec_of(grammar::GrammarSpec::Kind::kRegex, "[a-z]+"),
        spec_of(grammar::GrammarSpec::Kind::kGbnf, "root ::= \"x\""),
        spec_of(grammar::GrammarSpec::Kind::kDsml, R"({"tools":[]})"),
        spec_of(grammar::GrammarSpec::Kind::kChoice, "", {"yes", "no \"quoted\""})}) {
    engine::GenerationRequest g = request();
    g.grammar_spec = s;
    auto back = api::parse_grammar_spec(
        *body_of(build_upstream_call(UpstreamKind::kFathom, g, 1, {}, "", ""))
             .find("grammar_spec"));
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(back->kind, s->kind);
    EXPECT_EQ(back->text, s->text);
    EXPECT_EQ(back->choices, s->choices);
  }
  // A continuation sends the same features (the replica advances the grammar and the budget
  // over the resumed ids itself).
  const std::vector<int32_t> sofar = {8, 9};
  const Value c = body_of(build_upstream_call(UpstreamKind::kFathom, featured(), 1, sofar, "", ""));
  EXPECT_EQ(ints(c.find("resume_output_ids")), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(int_of(c.find("reasoning_budget")), 100);
  EXPECT_NE(c.find("grammar_spec"), nullptr);
}

TEST(GrammarSpecWire, MalformedSpecsAre400sNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([])", "'grammar_spec' must be an object"},
      {R"({"text":"x"})", "'grammar_spec.kind'"},
      {R"({"kind":"lark","text":"x"})", "'grammar_spec.kind'"},
      {R"({"kind":"regex"})", "'grammar_spec.text'"},
      {R"({"kind":"regex","text":5})", "'grammar_spec.text'"},
      {R"({"kind":"choice","choices":[]})", "'grammar_spec.choices'"},
      {R"({"kind":"choice","choices":["a",1]})", "'grammar_spec.choices'"},
      {R"({"kind":"choice","choices":["a"],"text":"x"})", "'grammar_spec.text'"},
      {R"({"kind":"regex","text":"x","choices":["a"]})", "'grammar_spec.choices'"},
      {R"({"kind":"regex","text":"x","json":{}})", "'grammar_spec.json'"},
      {R"({"kind":"json_schema","text":"{}","json":{"whitespace":"wide"}})",
       "'grammar_spec.json.whitespace'"},
      {R"({"kind":"json_schema","text":"{}","json":{"max_whitespace":5000}})",
       "'grammar_spec.json.max_whitespace'"},
      {R"({"kind":"json_schema","text":"{}","json":{"strict_additional_properties":1}})",
       "'grammar_spec.json.strict_additional_properties'"},
      {R"({"kind":"json_schema","text":"{}","json":{"indent":2}})", "'grammar_spec.json.indent'"},
      {R"({"kind":"regex","text":"x","extra":1})", "'grammar_spec.extra'"},
  };
  for (const auto& [json, why] : cases) {
    auto v = pyjson::parse(json);
    ASSERT_TRUE(v.is_ok()) << json;
    auto s = api::parse_grammar_spec(*v);
    ASSERT_FALSE(s.is_ok()) << json;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << json;
    EXPECT_NE(s.status().message().find(why), std::string::npos)
        << json << " -> " << s.status().message();
  }
}

TEST(UpstreamCall, VllmMapsTheFeaturesOntoItsOwnFields) {
  const std::vector<int32_t> sofar = {8, 9, 7, 10};  // two reasoning tokens, then </think> (7)
  const Value b = body_of(build_upstream_call(UpstreamKind::kVllm, featured(), 1, {}, "", ""));
  EXPECT_EQ(int_of(b.find("logprobs")), 3);
  EXPECT_TRUE(b.find("return_tokens_as_token_ids")->boolean);
  EXPECT_EQ(ints(b.find("stop_token_ids")), (std::vector<int64_t>{40, 41}));
  EXPECT_EQ(int_of(b.find("thinking_token_budget")), 100);
  for (const char* f : {"logprob_ids", "reasoning_budget", "think_end_id", "grammar_spec"})
    EXPECT_EQ(b.find(f), nullptr) << f;
  const Value* so = b.find("structured_outputs");
  ASSERT_NE(so, nullptr);
  ASSERT_TRUE(so->find("json") && so->find("json")->is_object());  // the schema, parsed
  EXPECT_EQ(so->find("json")->find("type")->text, "object");
  EXPECT_TRUE(so->find("disable_any_whitespace")->boolean);
  EXPECT_TRUE(so->find("disable_additional_properties")->boolean);
  // A continuation: the budget left after the reasoning already on the prompt.
  engine::GenerationRequest g = featured();
  g.max_tokens = 20;
  EXPECT_EQ(int_of(body_of(build_upstream_call(UpstreamKind::kVllm, g, 1,
                                               std::span<const int32_t>(sofar).first(2), "", ""))
                       .find("thinking_token_budget")),
            98);
  g.reasoning_budget = -1;
  g.think_end_id = -1;
  g.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kRegex, "[0-9]+");
  EXPECT_EQ(body_of(build_upstream_call(UpstreamKind::kVllm, g, 1, sofar, "", ""))
                .find("structured_outputs")
                ->find("regex")
                ->text,
            "[0-9]+");
  g.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kGbnf, "root ::= \"a\"");
  EXPECT_EQ(body_of(build_upstream_call(UpstreamKind::kVllm, g, 1, {}, "", ""))
                .find("structured_outputs")
                ->find("grammar")
                ->text,
            "root ::= \"a\"");
  g.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kChoice, "", {"a", "b"});
  const Value choice = body_of(build_upstream_call(UpstreamKind::kVllm, g, 1, {}, "", ""));
  const Value* ch = choice.find("structured_outputs")->find("choice");
  ASSERT_NE(ch, nullptr);
  EXPECT_EQ(ch->items.size(), 2u);
}

TEST(UpstreamCall, SglangMapsTheFeaturesOntoItsOwnFields) {
  engine::GenerationRequest g = featured();
  g.reasoning_budget = -1;  // SGLang has none (a 400, below)
  const Value b = body_of(build_upstream_call(UpstreamKind::kSglang, g, 1, {}, "", "r"));
  EXPECT_TRUE(b.find("return_logprob")->boolean);
  EXPECT_EQ(int_of(b.find("top_logprobs_num")), 3);
  const Value* sp = b.find("sampling_params");
  EXPECT_EQ(ints(sp->find("stop_token_ids")), (std::vector<int64_t>{40, 41}));
  EXPECT_EQ(sp->find("json_schema")->text, g.grammar_spec->text);  // a string, as SGLang takes it
  g.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kRegex, "[0-9]+");
  EXPECT_EQ(body_of(build_upstream_call(UpstreamKind::kSglang, g, 1, {}, "", "r"))
                .find("sampling_params")
                ->find("regex")
                ->text,
            "[0-9]+");
  g.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kGbnf, "root ::= \"a\"");
  EXPECT_EQ(body_of(build_upstream_call(UpstreamKind::kSglang, g, 1, {}, "", "r"))
                .find("sampling_params")
                ->find("ebnf")
                ->text,
            "root ::= \"a\"");
  // Choices as an EBNF alternation of escaped literals.
  g.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kChoice, "", {"a\"b", "c\\d", "e\nf"});
  EXPECT_EQ(body_of(build_upstream_call(UpstreamKind::kSglang, g, 1, {}, "", "r"))
                .find("sampling_params")
                ->find("ebnf")
                ->text,
            R"(root ::= "a\"b" | "c\\d" | "e\x0af")");
  const Value plain =
      body_of(build_upstream_call(UpstreamKind::kSglang, request(), 1, {}, "", "r"));
  EXPECT_EQ(plain.find("return_logprob"), nullptr);
  EXPECT_EQ(plain.find("sampling_params")->find("stop_token_ids"), nullptr);
}

// The logits controls as each kind spells them (vLLM's SamplingParams and OpenAI request
// fields; SGLang's sampling_params logit_bias and min_new_tokens), min_tokens counting what a
// continuation still has to generate where the output so far goes on the prompt.
TEST(UpstreamCall, LogitControlsAsEachKindSpellsThem) {
  engine::GenerationRequest g = request();
  g.logit_bias = {{5, 2.5f}, {9, -100.0f}};
  g.allowed_token_ids = {3, 5, 9};
  g.min_tokens = 10;
  g.bad_words = {{4, 6}, {8}};
  g.bad_words_text = {"x y"};
  const std::vector<int32_t> sofar = {3, 5, 9, 3};
  auto bias_of = [](const Value* v) {
    std::vector<std::pair<std::string, double>> out;
    for (size_t i = 0; v && i < v->keys.size(); ++i)
      out.emplace_back(v->keys[i], v->items[i].number);
    return out;
  };
  const std::vector<std::pair<std::string, double>> bias = {{"5", 2.5}, {"9", -100.0}};
  const Value f = body_of(build_upstream_call(UpstreamKind::kFathom, g, 1, sofar, "", ""));
  EXPECT_EQ(bias_of(f.find("logit_bias")), bias);
  EXPECT_EQ(ints(f.find("allowed_token_ids")), (std::vector<int64_t>{3, 5, 9}));
  EXPECT_EQ(int_of(f.find("min_tokens")), 10);  // the replica recomputes the output so far
  ASSERT_NE(f.find("bad_words_ids"), nullptr);
  ASSERT_EQ(f.find("bad_words_ids")->items.size(), 2u);
  EXPECT_EQ(ints(&f.find("bad_words_ids")->items[0]), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(ints(&f.find("bad_words_ids")->items[1]), (std::vector<int64_t>{8}));
  EXPECT_EQ(f.find("bad_words"), nullptr);  // no text to a Fathom replica
  const Value v = body_of(build_upstream_call(UpstreamKind::kVllm, g, 1, sofar, "", ""));
  EXPECT_EQ(bias_of(v.find("logit_bias")), bias);
  EXPECT_EQ(ints(v.find("allowed_token_ids")), (std::vector<int64_t>{3, 5, 9}));
  EXPECT_EQ(int_of(v.find("min_tokens")), 6);
  ASSERT_NE(v.find("bad_words"), nullptr);
  ASSERT_EQ(v.find("bad_words")->items.size(), 1u);
  EXPECT_EQ(v.find("bad_words")->items[0].text, "x y");
  EXPECT_EQ(v.find("bad_words_ids"), nullptr);
  g.min_tokens = 4;  // all generated already
  EXPECT_EQ(
      body_of(build_upstream_call(UpstreamKind::kVllm, g, 1, sofar, "", "")).find("min_tokens"),
      nullptr);
  g.min_tokens = 10;
  g.allowed_token_ids.clear();
  g.bad_words.clear();
  const Value s = body_of(build_upstream_call(UpstreamKind::kSglang, g, 1, sofar, "", "r"));
  EXPECT_EQ(bias_of(s.find("sampling_params")->find("logit_bias")), bias);
  EXPECT_EQ(int_of(s.find("sampling_params")->find("min_new_tokens")), 6);
  const Value plain = body_of(build_upstream_call(UpstreamKind::kVllm, request(), 1, {}, "", ""));
  for (const char* k : {"logit_bias", "allowed_token_ids", "min_tokens", "bad_words"})
    EXPECT_EQ(plain.find(k), nullptr) << k;
  // What SGLang has no field for, and a vLLM upstream's missing bad_words_ids: a 400.
  engine::GenerationRequest a = request();
  a.allowed_token_ids = {3};
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kVllm, a, 1).is_ok());
  EXPECT_NE(
      check_upstream_supports(UpstreamKind::kSglang, a, 1).message().find("allowed_token_ids"),
      std::string::npos);
  engine::GenerationRequest w = request();
  w.bad_words = {{4}};
  w.bad_words_text = {"x"};
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kVllm, w, 1).is_ok());
  EXPECT_NE(check_upstream_supports(UpstreamKind::kSglang, w, 1).message().find("bad_words"),
            std::string::npos);
  w.bad_words_from_ids = 1;
  EXPECT_NE(check_upstream_supports(UpstreamKind::kVllm, w, 1).message().find("bad_words_ids"),
            std::string::npos);
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kFathom, w, 1).is_ok());
}

TEST(UpstreamCall, WhatAKindCannotCarryIsA400NamingIt) {
  engine::GenerationRequest tools = request();
  tools.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kDsml, "{}");
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kFathom, tools, 1).is_ok());
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kFathom, featured(), 3).is_ok());
  for (UpstreamKind k : {UpstreamKind::kVllm, UpstreamKind::kSglang}) {
    const Status s = check_upstream_supports(k, tools, 1);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_EQ(s.message().rfind("'tools'", 0), 0u) << s.message();
  }
  engine::GenerationRequest budget = request();
  budget.reasoning_budget = 10;
  budget.think_end_id = 7;
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kVllm, budget, 1).is_ok());
  const Status s = check_upstream_supports(UpstreamKind::kSglang, budget, 1);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_EQ(s.message().rfind("'thinking.budget_tokens'", 0), 0u) << s.message();
  // A grammar without its source cannot travel at all.
  auto table = grammar::TokenTable::from_bytes({"a", "b"}, 2, {});
  ASSERT_TRUE(table.is_ok());
  auto built = grammar::build_grammar(*spec_of(grammar::GrammarSpec::Kind::kRegex, "a+"));
  ASSERT_TRUE(built.is_ok());
  auto compiled = grammar::CompiledGrammar::compile(*built, *table);
  ASSERT_TRUE(compiled.is_ok());
  engine::GenerationRequest bare = request();
  bare.grammar = *compiled;
  EXPECT_EQ(check_upstream_supports(UpstreamKind::kFathom, bare, 1).code(),
            StatusCode::kUnsupported);
  bare.grammar_spec = spec_of(grammar::GrammarSpec::Kind::kRegex, "a+");
  EXPECT_TRUE(check_upstream_supports(UpstreamKind::kFathom, bare, 1).is_ok());
}

// Reads `lines` with logprobs asked (k alternatives): every update's logprobs, flattened.
struct ReadLp {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> logprobs;
  FinishCause cause = FinishCause::kNone;
  Status status;
};
ReadLp read_lp(UpstreamKind kind, const std::vector<std::string>& lines, int k) {
  ReadLp out;
  static const std::vector<int32_t> kPrompt = {5, 6, 7};
  UpstreamStreamReader reader(kind, 1, 1000, kPrompt, k);
  for (const std::string& l : lines) {
    std::vector<Update> ups;
    out.status = reader.feed(l, &ups);
    for (Update& u : ups) {
      if (k >= 0) {
        EXPECT_EQ(u.logprobs.size(), u.tokens.size());
      }
      out.tokens.insert(out.tokens.end(), u.tokens.begin(), u.tokens.end());
      out.logprobs.insert(out.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
      if (u.cause != FinishCause::kNone) out.cause = u.cause;
    }
    if (!out.status.is_ok()) break;
  }
  return out;
}

// The logprobs every kind's fixture below describes: ids 11 and 12, two alternatives each.
void expect_fixture_logprobs(const ReadLp& r) {
  ASSERT_TRUE(r.status.is_ok()) << r.status.message();
  ASSERT_EQ(r.tokens, (std::vector<int32_t>{11, 12}));
  ASSERT_EQ(r.logprobs.size(), 2u);
  EXPECT_EQ(r.logprobs[0].token, 11);
  EXPECT_FLOAT_EQ(r.logprobs[0].logprob, -0.25f);
  ASSERT_EQ(r.logprobs[0].top_count, 2);
  EXPECT_EQ(r.logprobs[0].top[0], (std::pair<int32_t, float>{11, -0.25f}));
  EXPECT_EQ(r.logprobs[0].top[1], (std::pair<int32_t, float>{30, -1.5f}));
  EXPECT_EQ(r.logprobs[1].token, 12);
  EXPECT_EQ(r.logprobs[1].logprob, -INFINITY);  // null / the -9999 stand-ins
  ASSERT_EQ(r.logprobs[1].top_count, 2);
  EXPECT_EQ(r.logprobs[1].top[0], (std::pair<int32_t, float>{31, -0.5f}));
  EXPECT_EQ(r.logprobs[1].top[1], (std::pair<int32_t, float>{32, -0.75f}));
}

TEST(UpstreamReader, FathomLogprobIds) {
  const ReadLp r = read_lp(
      UpstreamKind::kFathom,
      {R"(data: {"choices":[{"index":0,"text":"x","token_ids":[11],"logprob_ids":[{"id":11,"logprob":-0.25,"top":[[11,-0.25],[30,-1.5]]}],"finish_reason":null}]})",
       R"(data: {"choices":[{"index":0,"text":"","token_ids":[12],"logprob_ids":[{"id":12,"logprob":null,"top":[[31,-0.5],[32,-0.75]]}],"finish_reason":"stop"}]})",
       "data: [DONE]"},
      2);
  expect_fixture_logprobs(r);
  EXPECT_EQ(r.cause, FinishCause::kEos);
  const std::string ok =
      R"(data: {"choices":[{"index":0,"token_ids":[11],"logprob_ids":[{"id":11,"logprob":-0.25,"top":[[11,-0.25],[30,-1.5]]}]}]})";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"(data: {"choices":[{"index":0,"token_ids":[11]}]})", "'logprob_ids' is not a list"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11,12],"logprob_ids":[{"id":11,"logprob":-1,"top":[]}]}]})",
       "1 entries for 2"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprob_ids":[{"id":12,"logprob":-1,"top":[]}]}]})",
       "not its token's"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprob_ids":[{"id":11,"logprob":"x","top":[]}]}]})",
       "without a log probability"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprob_ids":[{"id":11,"logprob":true,"top":[]}]}]})",
       "without a log probability"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprob_ids":[{"id":11,"logprob":-1,"top":[[1,-1],[2,-2],[3,-3]]}]}]})",
       "at most 2"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprob_ids":[{"id":11,"logprob":-1,"top":[[1]]}]}]})",
       "[id, logprob]"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprob_ids":[{"id":11,"logprob":-1,"top":[[1000,-1]]}]}]})",
       "[id, logprob]"},
  };
  for (const auto& [line, why] : bad) {
    const ReadLp b = read_lp(UpstreamKind::kFathom, {ok, line}, 2);
    EXPECT_EQ(b.status.code(), StatusCode::kCorrupt) << line;
    EXPECT_NE(b.status.message().find(why), std::string::npos)
        << line << " -> " << b.status.message();
  }
  // Without logprobs asked, logprob_ids are not read (nor required).
  EXPECT_TRUE(
      read_lp(UpstreamKind::kFathom, {R"(data: {"choices":[{"index":0,"token_ids":[11]}]})"}, -1)
          .status.is_ok());
}

TEST(UpstreamReader, VllmTokenIdLogprobs) {
  // return_tokens_as_token_ids: "token_id:N"; top_logprobs holds the K most likely plus the
  // sampled token (K + 1 entries), in any order; -9999.0 is vLLM's clamp of -inf.
  const ReadLp r = read_lp(
      UpstreamKind::kVllm,
      {R"(data: {"choices":[{"index":0,"text":"x","token_ids":[11],"logprobs":{"text_offset":[0],"token_logprobs":[-0.25],"tokens":["token_id:11"],"top_logprobs":[{"token_id:30":-1.5,"token_id:11":-0.25}]},"finish_reason":null}]})",
       R"(data: {"choices":[{"index":0,"text":"y","token_ids":[12],"logprobs":{"text_offset":[1],"token_logprobs":[-9999.0],"tokens":["token_id:12"],"top_logprobs":[{"token_id:12":-9999.0,"token_id:32":-0.75,"token_id:31":-0.5}]},"finish_reason":"length"}]})",
       "data: [DONE]"},
      2);
  expect_fixture_logprobs(r);
  EXPECT_EQ(r.cause, FinishCause::kLength);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprobs":null}]})", "'logprobs' is not"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprobs":{"tokens":[" hi"],"token_logprobs":[-1],"top_logprobs":[{}]}}]})",
       "token_id:<its id>"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprobs":{"tokens":["token_id:12"],"token_logprobs":[-1],"top_logprobs":[{}]}}]})",
       "token_id:<its id>"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprobs":{"tokens":["token_id:11","token_id:1"],"token_logprobs":[-1],"top_logprobs":[{}]}}]})",
       "do not match"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprobs":{"tokens":["token_id:11"],"token_logprobs":[-1]}}]})",
       "'logprobs.top_logprobs'"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprobs":{"tokens":["token_id:11"],"token_logprobs":[-1],"top_logprobs":[{"a":-1}]}}]})",
       "token_id:<id>"},
      {R"(data: {"choices":[{"index":0,"token_ids":[11],"logprobs":{"tokens":["token_id:11"],"token_logprobs":[-1],"top_logprobs":[{"token_id:1":-1,"token_id:2":-1,"token_id:3":-1,"token_id:4":-1}]}}]})",
       "at most 3"},
  };
  for (const auto& [line, why] : bad) {
    const ReadLp b = read_lp(UpstreamKind::kVllm, {line}, 2);
    EXPECT_EQ(b.status.code(), StatusCode::kCorrupt) << line;
    EXPECT_NE(b.status.message().find(why), std::string::npos)
        << line << " -> " << b.status.message();
  }
}

TEST(UpstreamReader, SglangLogprobsCumulativeAndIncremental) {
  // meta_info.output_token_logprobs [[logprob, id, text]], output_top_logprobs per position;
  // cumulative (default) or only the new ones (--incremental-streaming-output), as output_ids.
  const std::vector<std::string> cumulative = {
      R"(data: {"output_ids":[11],"meta_info":{"completion_tokens":1,"output_token_logprobs":[[-0.25,11,null]],"output_top_logprobs":[[[-0.25,11,null],[-1.5,30,null]]]}})",
      R"(data: {"output_ids":[11,12],"meta_info":{"completion_tokens":2,"finish_reason":{"type":"stop","matched":12},"output_token_logprobs":[[-0.25,11,null],[-999999999.0,12,null]],"output_top_logprobs":[[[-0.25,11,null],[-1.5,30,null]],[[-0.5,31,null],[-0.75,32,null]]]}})",
      "data: [DONE]"};
  const std::vector<std::string> incremental = {
      cumulative[0],
      R"(data: {"output_ids":[12],"meta_info":{"completion_tokens":2,"finish_reason":{"type":"stop","matched":12},"output_token_logprobs":[[-999999999.0,12,"x"]],"output_top_logprobs":[[[-0.5,31,"a"],[-0.75,32,"b"]]]}})",
      "data: [DONE]"};
  for (const auto* lines : {&cumulative, &incremental}) {
    const ReadLp r = read_lp(UpstreamKind::kSglang, *lines, 2);
    expect_fixture_logprobs(r);
    EXPECT_EQ(r.cause, FinishCause::kEos);
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"(data: {"output_ids":[11],"meta_info":{"completion_tokens":1}})", "output_token_logprobs"},
      {R"(data: {"output_ids":[11],"meta_info":{"completion_tokens":1,"output_token_logprobs":[[-1,12,null]],"output_top_logprobs":[[]]}})",
       "its id"},
      {R"(data: {"output_ids":[11],"meta_info":{"completion_tokens":1,"output_token_logprobs":[[-1,11]],"output_top_logprobs":[[]]}})",
       "its id"},
      {R"(data: {"output_ids":[11],"meta_info":{"completion_tokens":1,"output_token_logprobs":[[-1,11,null]]}})",
       "output_top_logprobs"},
      {R"(data: {"output_ids":[11],"meta_info":{"completion_tokens":1,"output_token_logprobs":[[-1,11,null]],"output_top_logprobs":[[[-1,1,null],[-1,2,null],[-1,3,null]]]}})",
       "at most 2"},
  };
  for (const auto& [line, why] : bad) {
    const ReadLp b = read_lp(UpstreamKind::kSglang, {line}, 2);
    EXPECT_EQ(b.status.code(), StatusCode::kCorrupt) << line;
    EXPECT_NE(b.status.message().find(why), std::string::npos)
        << line << " -> " << b.status.message();
  }
}

// A scripted upstream on loopback: answers GET /health with 200 and every POST with `answer`
// (raw bytes: head and body), then closes. Counts the POSTs.
class Upstream {
 public:
  explicit Upstream(std::string answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 16);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_.load()) {
          if (c >= 0) ::close(c);
          return;
        }
        const std::string req = loopback::read_request_head(c);
        const std::string reply = req.rfind("GET /health", 0) == 0
                                      ? std::string("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                                      : answer_;
        if (req.rfind("POST", 0) == 0) ++posts_;
        (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        ::shutdown(c, SHUT_WR);
        char buf[4096];
        while (::recv(c, buf, sizeof buf, 0) > 0) {
        }
        ::close(c);
      }
    });
  }
  ~Upstream() {
    stop_.store(true);
    ::shutdown(fd_, SHUT_RDWR);
    int c = ::socket(AF_INET, SOCK_STREAM, 0);  // wakes accept() where shutdown does not
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port_));
    (void)::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::close(c);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int posts() const { return posts_.load(); }

 private:
  std::string answer_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> posts_{0};
  std::thread thread_;
};

std::string http(const std::string& status, const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         body;
}

std::string sse(const std::vector<std::string>& lines) {
  std::string body;
  for (const std::string& l : lines) body += l + "\n";
  return http("200 OK", body);
}

// The client's view of one request through a RemoteGenerator in front of `up`: its tokens
// and its final event.
engine::StreamEvent through(UpstreamKind kind, Upstream& up, std::vector<int32_t>* tokens) {
  RemoteGeneratorOptions o;
  o.upstream = kind;
  o.max_attempts = 1;
  o.vocab_size = 1000;
  o.idle_timeout_ms = 5000;
  o.probes.probe_interval_s = 0.05;
  o.probes.log = false;
  auto gen = RemoteGenerator::create({up.url()}, o);
  EXPECT_TRUE(gen.is_ok());
  for (int i = 0; i < 200 && !(*gen)->replicas().any_up(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  engine::GenerationRequest g = request();
  g.cache_salt = 0;
  auto streams = (*gen)->submit_n(std::move(g), 1);
  EXPECT_TRUE(streams.is_ok()) << streams.status().message();
  engine::StreamEvent ev;
  for (;;) {
    EXPECT_TRUE((*streams)[0]->next(&ev, 10000));
    tokens->insert(tokens->end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finished) return ev;
  }
}

// Every event the client sees of request `g` through a RemoteGenerator in front of `up`.
std::vector<engine::StreamEvent> events_through(UpstreamKind kind, Upstream& up,
                                                engine::GenerationRequest g) {
  RemoteGeneratorOptions o;
  o.upstream = kind;
  o.max_attempts = 1;
  o.vocab_size = 1000;
  o.eos_id = 1;
  o.idle_timeout_ms = 5000;
  o.probes.probe_interval_s = 0.05;
  o.probes.log = false;
  o.follow_kv_events = false;
  auto gen = RemoteGenerator::create({up.url()}, o);
  EXPECT_TRUE(gen.is_ok());
  for (int i = 0; i < 200 && !(*gen)->replicas().any_up(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  g.cache_salt = 0;
  auto streams = (*gen)->submit_n(std::move(g), 1);
  EXPECT_TRUE(streams.is_ok()) << streams.status().message();
  std::vector<engine::StreamEvent> out;
  if (!streams.is_ok()) return out;
  for (;;) {
    engine::StreamEvent ev;
    EXPECT_TRUE((*streams)[0]->next(&ev, 10000));
    out.push_back(ev);
    if (ev.finished) return out;
  }
}

TEST(RemoteGeneratorUpstream, AStopTokenReachesTheClientWithTheFinishAndItsLogprob) {
  // Fathom's stream: the stop id's text went out before the finish chunk (as a replica sends
  // a stop id with text); the client still gets it in the final event, as from an engine.
  const std::string lp = R"("logprob_ids":[{"id":11,"logprob":-0.25,"top":[[11,-0.25]]}])";
  Upstream up(sse(
      {R"(data: {"choices":[{"index":0,"text":"a","token_ids":[11],)" + lp +
           R"(,"finish_reason":null}]})",
       R"(data: {"choices":[{"index":0,"text":"b","token_ids":[12,40],"logprob_ids":[{"id":12,"logprob":-0.5,"top":[[12,-0.5]]},{"id":40,"logprob":-1.0,"top":[[40,-1.0]]}],"finish_reason":null}]})",
       R"(data: {"choices":[{"index":0,"text":"","token_ids":[],"logprob_ids":[],"finish_reason":"stop"}]})",
       "data: [DONE]"}));
  engine::GenerationRequest g = request();
  g.stop_ids = {40};
  g.top_logprobs = 1;
  const std::vector<engine::StreamEvent> evs = events_through(UpstreamKind::kFathom, up, g);
  ASSERT_EQ(evs.size(), 3u);
  EXPECT_EQ(evs[0].tokens, (std::vector<int32_t>{11}));
  EXPECT_EQ(evs[1].tokens, (std::vector<int32_t>{12}));
  EXPECT_FALSE(evs[1].finished);
  EXPECT_EQ(evs[2].tokens, (std::vector<int32_t>{40}));
  EXPECT_TRUE(evs[2].finished);
  EXPECT_EQ(evs[2].cause, FinishCause::kStopToken);
  for (const engine::StreamEvent& e : evs) {
    ASSERT_EQ(e.logprobs.size(), e.tokens.size());
    for (size_t k = 0; k < e.tokens.size(); ++k) {
      EXPECT_EQ(e.logprobs[k].token, e.tokens[k]);
      EXPECT_EQ(e.logprobs[k].top_count, 1);
    }
  }
  EXPECT_FLOAT_EQ(evs[2].logprobs[0].logprob, -1.0f);
  // EOS the same way, as kEos (and a token that ends nothing is not held back).
  Upstream eos(sse({R"(data: {"choices":[{"index":0,"token_ids":[11,1],"finish_reason":null}]})",
                    R"(data: {"choices":[{"index":0,"token_ids":[],"finish_reason":"stop"}]})",
                    "data: [DONE]"}));
  const std::vector<engine::StreamEvent> e2 = events_through(UpstreamKind::kFathom, eos, request());
  ASSERT_EQ(e2.size(), 2u);
  EXPECT_EQ(e2[0].tokens, (std::vector<int32_t>{11}));
  EXPECT_EQ(e2[1].tokens, (std::vector<int32_t>{1}));
  EXPECT_EQ(e2[1].cause, FinishCause::kEos);
}

TEST(RemoteGeneratorUpstream, WellFormedStreamsFinish) {
  {
    Upstream up(sse(kVllm));
    std::vector<int32_t> tokens;
    const engine::StreamEvent ev = through(UpstreamKind::kVllm, up, &tokens);
    EXPECT_EQ(ev.cause, FinishCause::kLength);
    EXPECT_EQ(tokens, (std::vector<int32_t>{11, 12, 13}));
    EXPECT_EQ(ev.cached_tokens, 2);
  }
  for (const auto* lines : {&kSglangCumulative, &kSglangIncremental}) {
    Upstream up(sse(*lines));
    std::vector<int32_t> tokens;
    const engine::StreamEvent ev = through(UpstreamKind::kSglang, up, &tokens);
    EXPECT_EQ(ev.cause, FinishCause::kEos);
    EXPECT_EQ(tokens, (std::vector<int32_t>{11, 12, 13, 14}));
  }
}

TEST(RemoteGeneratorUpstream, BrokenAnswersEndInAnErrorNeverAFinish) {
  struct Case {
    UpstreamKind kind;
    std::string answer;
    std::string why;
  };
  const std::vector<Case> cases = {
      // Tokens, then the stream ends without a finish or [DONE] (a truncated answer).
      {UpstreamKind::kVllm, sse({kVllm[0], kVllm[2]}), "ended before [DONE]"},
      {UpstreamKind::kSglang, sse({kSglangCumulative[0], kSglangCumulative[2]}),
       "ended before [DONE]"},
      // [DONE] before the finish.
      {UpstreamKind::kVllm, sse({kVllm[0], "data: [DONE]"}), "[DONE] before"},
      // Garbage mid-stream.
      {UpstreamKind::kVllm, sse({kVllm[0], "data: {\"choices\":[{\"index\":0}]}"}), "token_ids"},
      {UpstreamKind::kSglang, sse({kSglangCumulative[0], "data: {oops"}), "not a JSON object"},
      // A vLLM too old for return_token_ids: text without ids.
      {UpstreamKind::kVllm,
       sse({R"(data: {"choices":[{"index":0,"text":"hi","finish_reason":"stop"}]})",
            "data: [DONE]"}),
       "token_ids"},
      // Not HTTP at all; a 500.
      {UpstreamKind::kSglang, "SSH-2.0-OpenSSH\r\n", ""},
      {UpstreamKind::kVllm, http("500 Internal Server Error", R"({"error":{"message":"dead"}})"),
       "dead"},
  };
  for (const Case& c : cases) {
    Upstream up(c.answer);
    std::vector<int32_t> tokens;
    const engine::StreamEvent ev = through(c.kind, up, &tokens);
    EXPECT_EQ(ev.cause, FinishCause::kError) << c.answer;
    EXPECT_FALSE(ev.error.is_ok());
    EXPECT_NE(ev.error.message().find(c.why), std::string::npos)
        << c.answer << " -> " << ev.error.message();
  }
  // The request's own fault (a 400 from the upstream, in SGLang's error shape) is passed on
  // as the request's error, not retried.
  Upstream bad(http("400 Bad Request", R"({"error":{"message":"max_new_tokens bad"}})"));
  std::vector<int32_t> tokens;
  const engine::StreamEvent ev = through(UpstreamKind::kSglang, bad, &tokens);
  EXPECT_EQ(ev.cause, FinishCause::kError);
  EXPECT_EQ(ev.error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ev.error.message(), "max_new_tokens bad");
}

}  // namespace
}  // namespace fathom::router
