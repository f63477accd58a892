// The OpenAI (legacy) Completions adapter: typed validation with OpenAI-shaped errors that name
// the field, the prompt forms (string, token ids, a one-element list; batches rejected), and
// the text_completion response and chunks with the legacy logprobs object, written from
// OpenAI's API reference.
#include "api/completions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "api/chat_completions.h"
#include "api/errors.h"

namespace fathom::api {
namespace {

using nlohmann::json;

std::string req(const std::string& extra, const std::string& prompt = R"("Say this is a test")") {
  return R"({"model":"m","prompt":)" + prompt + (extra.empty() ? "" : "," + extra) + "}";
}

json rejected(const std::string& body, const CompletionsOptions& o = {}) {
  auto r = parse_completions_request(body, o);
  EXPECT_FALSE(r.is_ok()) << "accepted: " << body;
  if (r.is_ok()) return json::object();
  EXPECT_EQ(http_status_of(r.status()), 400) << r.status().message();
  json e = json::parse(openai_error_json(r.status()))["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  return e;
}

std::vector<json> data_frames(const std::string& sse, bool* done) {
  std::vector<json> out;
  *done = false;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t e = sse.find("\n\n", pos);
    std::string payload = sse.substr(pos + 6, e - pos - 6);
    pos = e;
    if (payload == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(json::parse(payload));
  }
  return out;
}

TEST(CompletionsRequest, PromptForms) {
  auto s = parse_completions_request(req(""), {});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_FALSE(s->prompt_is_ids);
  EXPECT_EQ(s->prompt_text, "Say this is a test");
  auto ids = parse_completions_request(req("", "[1, 2, 3]"), {});
  ASSERT_TRUE(ids.is_ok());
  EXPECT_TRUE(ids->prompt_is_ids);
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  auto one = parse_completions_request(req("", R"(["only one"])"), {});
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->prompt_text, "only one");
  auto one_ids = parse_completions_request(req("", "[[7, 8]]"), {});
  ASSERT_TRUE(one_ids.is_ok());
  EXPECT_EQ(one_ids->prompt_ids, (std::vector<int32_t>{7, 8}));
  for (const char* batch : {R"(["a", "b"])", "[[1], [2]]"}) {
    json e = rejected(req("", batch));
    EXPECT_EQ(e["param"], "prompt");
    EXPECT_NE(e["message"].get<std::string>().find("batched prompts are not supported"),
              std::string::npos);
  }
  EXPECT_EQ(rejected(R"({"model":"m"})")["param"], "prompt");
  EXPECT_EQ(rejected(req("", R"("")"))["param"], "prompt");
  EXPECT_EQ(rejected(req("", "[1, -2]"))["param"], "prompt");
  EXPECT_EQ(rejected(req("", "[1, 2.5]"))["param"], "prompt");
  EXPECT_EQ(rejected(req("", "{}"))["param"], "prompt");
  EXPECT_EQ(rejected("{bad")["param"], nullptr);
}

TEST(CompletionsRequest, TypedSamplingFields) {
  auto d = parse_completions_request(req(""), {});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->sampling.max_tokens, 16);  // OpenAI's default for /v1/completions
  EXPECT_EQ(d->n, 1);
  EXPECT_FALSE(d->logprobs.has_value());
  auto r = parse_completions_request(
      req(R"("max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":-1,"min_p":0.1,)"
          R"("repetition_penalty":1.1,"presence_penalty":1,"frequency_penalty":-1,"seed":42,)"
          R"("stop":["\n"],"n":2,"best_of":2,"logprobs":3,"ignore_eos":true,"user":"u",)"
          R"("stream":true,"stream_options":{"include_usage":true},"suffix":"","echo":false)"),
      {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->sampling.max_tokens, 7);
  EXPECT_EQ(r->sampling.temperature, 0.5);
  EXPECT_FALSE(r->sampling.top_k.has_value());
  EXPECT_EQ(r->sampling.seed, 42);
  EXPECT_EQ(r->sampling.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(r->logprobs, 3);
  EXPECT_TRUE(r->sampling.ignore_eos);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  struct Case {
    const char* extra;
    const char* param;
  };
  const Case cases[] = {
      {R"("temperature":"hot")", "temperature"},
      {R"("temperature":3)", "temperature"},
      {R"("top_p":0)", "top_p"},
      {R"("max_tokens":0)", "max_tokens"},
      {R"("max_tokens":1.5)", "max_tokens"},
      {R"("presence_penalty":3)", "presence_penalty"},
      {R"("seed":"x")", "seed"},
      {R"("top_k":-2)", "top_k"},
      {R"("n":0)", "n"},
      {R"("n":129)", "n"},
      {R"("logprobs":21)", "logprobs"},
      {R"("logprobs":true)", "logprobs"},
      {R"("echo":1)", "echo"},
      {R"("echo":true,"logprobs":2)", "echo"},
      {R"("echo":true,"resume_output_ids":[5])", "echo"},
      {R"("best_of":3)", "best_of"},
      {R"("suffix":"tail")", "suffix"},
      {R"("logit_bias":{"x":5})", "logit_bias"},
      {R"("logit_bias":{"-1":5})", "logit_bias"},
      {R"("logit_bias":{"99999999999":5})", "logit_bias"},
      {R"("logit_bias":{"1":101})", "logit_bias"},
      {R"("logit_bias":{"1":"5"})", "logit_bias"},
      {R"("logit_bias":[1])", "logit_bias"},
      {R"("allowed_token_ids":[])", "allowed_token_ids"},
      {R"("allowed_token_ids":[-1])", "allowed_token_ids"},
      {R"("allowed_token_ids":"1")", "allowed_token_ids"},
      {R"("bad_words":[""])", "bad_words"},
      {R"("bad_words":"x")", "bad_words"},
      {R"("bad_words":[1])", "bad_words"},
      {R"("bad_words_ids":[[]])", "bad_words_ids"},
      {R"("bad_words_ids":[1])", "bad_words_ids"},
      {R"("bad_words_ids":[[1.5]])", "bad_words_ids"},
      {R"("min_tokens":-1)", "min_tokens"},
      {R"("min_tokens":1.5)", "min_tokens"},
      {R"("stop":[1])", "stop"},
      {R"("stream_options":{"include_usage":true})", "stream_options"},
      {R"("stream":"yes")", "stream"},
      {R"("ignore_eos":1)", "ignore_eos"},
      {R"("guided_regex":5)", "guided_regex"},
      {R"("prompt_logprobs":3)", "prompt_logprobs"},
  };
  for (const Case& c : cases) EXPECT_EQ(rejected(req(c.extra))["param"], c.param) << c.extra;
}

TEST(CompletionsRequest, LogitControlsAreRead) {
  auto r = parse_completions_request(
      req(R"("logit_bias":{"5":-2.5,"7":100,"0":0},"allowed_token_ids":[3,1,3],"min_tokens":4,)"
          R"("bad_words":[" a b","c"],"bad_words_ids":[[1,2],[3]])"),
      {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const SamplingParams& s = r->sampling;
  EXPECT_EQ(s.logit_bias,
            (std::vector<std::pair<int32_t, double>>{{5, -2.5}, {7, 100.0}, {0, 0.0}}));
  EXPECT_EQ(s.allowed_token_ids, (std::vector<int32_t>{3, 1, 3}));  // the engine sorts them
  EXPECT_EQ(s.min_tokens, 4);
  EXPECT_EQ(s.bad_words, (std::vector<std::string>{" a b", "c"}));
  EXPECT_EQ(s.bad_words_ids, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  // Only /v1/completions takes the id-level bad_words_ids.
  ChatOptions chat;
  auto c = parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"bad_words_ids":[[1]]})", chat);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("bad_words_ids"), std::string::npos);
  auto ok = parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"logit_bias":{"9":1},)"
      R"("min_tokens":2,"bad_words":["x"],"allowed_token_ids":[9]})",
      chat);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->sampling.min_tokens, 2);
  EXPECT_EQ(ok->sampling.allowed_token_ids, (std::vector<int32_t>{9}));
}

TEST(CompletionsRequest, ModelIsResolved) {
  std::vector<ServedModel> models = {{"DeepSeek-V4.1", true}};
  CompletionsOptions o;
  o.models = &models;
  auto r = parse_completions_request(R"({"prompt":"x"})", o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->model, "DeepSeek-V4.1");
  auto bad = parse_completions_request(R"({"model":"davinci-002","prompt":"x"})", o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(http_status_of(bad.status()), 404);
  EXPECT_EQ(json::parse(openai_error_json(bad.status()))["error"]["code"], "model_not_found");
}

TEST(CompletionsResponder, CompleteResponseInOpenAisShape) {
  CompletionsResponder c("cmpl-1", "m", 1589478378);
  c.add("\n\nThis is");
  c.add(" indeed a test");
  c.finish(prompt::FinishReason::kLength);
  // https://platform.openai.com/docs/api-reference/completions/object
  EXPECT_EQ(json::parse(c.complete({5, 7, 0, 0})), json::parse(R"({
      "id":"cmpl-1","object":"text_completion","created":1589478378,"model":"m",
      "choices":[{"index":0,"text":"\n\nThis is indeed a test","logprobs":null,
                  "finish_reason":"length"}],
      "usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,
               "prompt_tokens_details":{"cached_tokens":0}}})"));
}

TEST(CompletionsResponder, LegacyLogprobsAndNChoices) {
  std::vector<CompletionsResponder> rs;
  for (int i : {1, 0}) rs.emplace_back("cmpl-2", "m", 1, CompletionsChoice{i, 2, true, false});
  rs[1].add("Hi", {{"H", -0.5f, {{"H", -0.5f}, {"Y", -1.25f}}}, {"i", -0.25f, {{"i", -0.25f}}}});
  rs[1].add("\xc3\xa9!", {{"\xc3\xa9", -1.0f, {}}, {"!", -INFINITY, {}}});
  rs[1].finish(prompt::FinishReason::kStop);
  rs[0].add("Yo", {{"Yo", -2.0f, {}}});
  rs[0].finish(prompt::FinishReason::kLength);
  json full = json::parse(completion_json(rs, {3, 5, 1, 0}));
  ASSERT_EQ(full["choices"].size(), 2u);
  EXPECT_EQ(full["choices"][0]["index"], 0);
  EXPECT_EQ(full["choices"][0]["text"], "Hi\u00e9!");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "stop");
  // The legacy object: parallel lists, top_logprobs as {token: logprob} dicts, and
  // text_offset the character offset of each token in the choice's text.
  EXPECT_EQ(full["choices"][0]["logprobs"], json::parse(R"({
      "tokens":["H","i","\u00e9","!"],
      "token_logprobs":[-0.5,-0.25,-1.0,-9999.0],
      "top_logprobs":[{"H":-0.5,"Y":-1.25},{"i":-0.25},{},{}],
      "text_offset":[0,1,2,3]})"));
  EXPECT_EQ(full["choices"][1]["index"], 1);
  EXPECT_EQ(full["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(full["usage"]["total_tokens"], 8);
  EXPECT_EQ(full["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST(CompletionsResponder, StreamChunksUsageAndDone) {
  CompletionsResponder s("cmpl-3", "m", 9, {0, 1, true, true});
  std::string out;
  out += s.stream("", {{"\xe4\xbd", -0.5f, {}}});  // half a character: held back
  out += s.stream("\xe4\xbd\xa0", {{"\xa0", -0.75f, {}}});
  out += s.stream("!", {{"!", -0.125f, {}}});
  out += s.stream_finish(prompt::FinishReason::kStop, {4, 3, 0, 0});
  bool done = false;
  auto f = data_frames(out, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(f.size(), 4u);  // two texts, the finish, the usage chunk
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(f[i]["object"], "text_completion");
    EXPECT_TRUE(f[i]["usage"].is_null());
  }
  EXPECT_EQ(f[0]["choices"][0]["text"], "\u4f60");
  EXPECT_EQ(f[0]["choices"][0]["logprobs"]["token_logprobs"], json::parse("[-0.5,-0.75]"));
  EXPECT_EQ(f[0]["choices"][0]["logprobs"]["text_offset"], json::parse("[0,1]"));
  EXPECT_EQ(f[1]["choices"][0]["logprobs"]["text_offset"], json::parse("[1]"));
  EXPECT_TRUE(f[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(f[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(f[2]["choices"][0]["text"], "");
  EXPECT_TRUE(f[3]["choices"].empty());
  EXPECT_EQ(f[3]["usage"]["total_tokens"], 7);

  // n > 1: no [DONE] until the tail; without include_usage no usage field at all.
  CompletionsResponder a("cmpl-4", "m", 9, {1, 2, false, false});
  std::string two = a.stream("x") + a.stream_finish(prompt::FinishReason::kLength, {});
  auto g = data_frames(two, &done);
  EXPECT_FALSE(done);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_FALSE(g[0].contains("usage"));
  EXPECT_EQ(g[0]["choices"][0]["index"], 1);
  EXPECT_TRUE(g[0]["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(a.stream_tail({}), "data: [DONE]\n\n");
  // An engine failure ends the stream in OpenAI's error shape, then [DONE] (as vLLM does).
  auto e = data_frames(a.stream_error(internal_error("engine died")), &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["error"]["message"], "engine died");
  EXPECT_EQ(e[0]["error"]["type"], "server_error");
}

TEST(CompletionsRequest, FathomIdLevelFieldsAndStopTokenIds) {
  auto r = parse_completions_request(
      req(R"("return_token_ids":true,"logprob_ids":3,"stop_token_ids":[7,8],"think_end_id":9,)"
          R"("reasoning_budget":100,"grammar_after_think":true,)"
          R"("grammar_spec":{"kind":"json_schema","text":"{\"type\":\"object\"}",)"
          R"("json":{"whitespace":"compact","strict_additional_properties":true}})",
          "[1, 2]"),
      {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->logprob_ids, 3);
  EXPECT_FALSE(r->logprobs.has_value());
  EXPECT_EQ(r->stop_token_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(r->think_end_id, 9);
  EXPECT_EQ(r->reasoning_budget, 100);
  EXPECT_TRUE(r->grammar_after_think);
  ASSERT_EQ(r->structured.kind, StructuredOutput::Kind::kSpec);
  EXPECT_EQ(r->structured.field, "grammar_spec");
  EXPECT_EQ(r->structured.spec->text, R"({"type":"object"})");
  EXPECT_EQ(r->structured.spec->json.whitespace, grammar::JsonSchemaOptions::Whitespace::kCompact);
  EXPECT_TRUE(r->structured.spec->json.strict_additional_properties);
  // None of them by default.
  auto plain = parse_completions_request(req(""), {});
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->logprob_ids, -1);
  EXPECT_EQ(plain->reasoning_budget, -1);
  EXPECT_EQ(plain->think_end_id, -1);
  EXPECT_TRUE(plain->stop_token_ids.empty());
  // Each misuse is a 400 naming its field.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"("logprob_ids":2)", "logprob_ids"},  // without return_token_ids
      {R"("return_token_ids":true,"logprob_ids":21)", "logprob_ids"},
      {R"("return_token_ids":true,"logprob_ids":true)", "logprob_ids"},
      {R"("return_token_ids":true,"logprob_ids":1,"logprobs":1)", "logprob_ids"},
      {R"("stop_token_ids":[-1])", "stop_token_ids"},
      {R"("stop_token_ids":5)", "stop_token_ids"},
      {R"("reasoning_budget":5)", "reasoning_budget"},  // without think_end_id
      {R"("reasoning_budget":-1,"think_end_id":3)", "reasoning_budget"},
      {R"("think_end_id":3)", "think_end_id"},  // used by nothing
      {R"("think_end_id":-3,"reasoning_budget":1)", "think_end_id"},
      {R"("grammar_after_think":true,"think_end_id":3)", "grammar_after_think"},  // no grammar
      {R"("grammar_after_think":true,"guided_regex":"a+")", "grammar_after_think"},
      {R"("grammar_after_think":1)", "grammar_after_think"},
      {R"("grammar_spec":{"kind":"regex"})", "grammar_spec.text"},
      {R"("grammar_spec":{"kind":"regex","text":"a"},"guided_regex":"b")", "grammar_spec"},
  };
  for (const auto& [extra, param] : bad) {
    json e = rejected(req(extra));
    EXPECT_EQ(e["param"], param) << extra << " -> " << e.dump();
  }
}

// Fathom's continuation fields: resume_output_ids (n = 1) and sample_index (0..127, n = 1),
// which together continue choice i of an n-sample request on its own.
TEST(CompletionsRequest, FathomResumeOutputIdsAndSampleIndex) {
  auto r = parse_completions_request(
      req(R"("seed":7,"resume_output_ids":[4,5],"sample_index":2)", "[1, 2]"), {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->resume_output_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(r->sample_index, 2);
  EXPECT_EQ(r->n, 1);
  // The bounds, n given as 1, and null as absent (the default, 0).
  for (const char* extra : {R"("sample_index":0)", R"("sample_index":127)",
                            R"("n":1,"sample_index":127)", R"("sample_index":null)"}) {
    auto ok = parse_completions_request(req(extra), {});
    ASSERT_TRUE(ok.is_ok()) << extra << ": " << ok.status().message();
  }
  EXPECT_EQ(parse_completions_request(req(R"("sample_index":127)"), {})->sample_index, 127);
  EXPECT_EQ(parse_completions_request(req(R"("sample_index":null)"), {})->sample_index, 0);
  EXPECT_EQ(parse_completions_request(req(""), {})->sample_index, 0);
  // n > 1 numbers its own choices; resume_output_ids needs n = 1 too.
  EXPECT_EQ(parse_completions_request(req(R"("n":3,"seed":1)"), {})->sample_index, 0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"("sample_index":-1)", "sample_index"},
      {R"("sample_index":128)", "sample_index"},
      {R"("sample_index":1.0)", "sample_index"},
      {R"("sample_index":"1")", "sample_index"},
      {R"("sample_index":true)", "sample_index"},
      {R"("sample_index":[1])", "sample_index"},
      {R"("sample_index":99999999999999999999)", "sample_index"},
      {R"("n":2,"sample_index":1)", "sample_index"},
      {R"("sample_index":1,"n":2)", "sample_index"},  // the order of the fields does not matter
      {R"("n":2,"sample_index":0)", "sample_index"},
      {R"("n":2,"resume_output_ids":[3])", "resume_output_ids"},
      {R"("resume_output_ids":3)", "resume_output_ids"},
      {R"("resume_output_ids":[-3])", "resume_output_ids"},
  };
  for (const auto& [extra, param] : bad) {
    json e = rejected(req(extra));
    EXPECT_EQ(e["param"], param) << extra << " -> " << e.dump();
  }
}

TEST(CompletionsResponder, LogprobIdsTravelWithTheirTokenIds) {
  CompletionsChoice choice{0, 1, false, false, true, true, nullptr};
  CompletionsResponder s("cmpl-5", "m", 9, choice);
  std::string out;
  s.add_token_ids({11});
  s.add_logprob_ids({{11, -0.5f, {{11, -0.5f}, {30, -1.25f}}}});
  out += s.stream("");  // no text yet: the id and its logprob wait
  s.add_token_ids({12});
  s.add_logprob_ids({{12, -INFINITY, {{31, -0.25f}, {32, -0.75f}}}});
  out += s.stream("ab");
  s.add_token_ids({1});
  s.add_logprob_ids({{1, -2.0f, {}}});
  out += s.stream_finish(prompt::FinishReason::kStop, {2, 3, 0, 0});
  bool done = false;
  auto f = data_frames(out, &done);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0]["choices"][0]["token_ids"], json::parse("[11,12]"));
  EXPECT_EQ(f[0]["choices"][0]["logprob_ids"], json::parse(R"([
      {"id":11,"logprob":-0.5,"top":[[11,-0.5],[30,-1.25]]},
      {"id":12,"logprob":null,"top":[[31,-0.25],[32,-0.75]]}])"));
  EXPECT_TRUE(f[0]["choices"][0]["logprobs"].is_null());  // no text-level logprobs
  EXPECT_EQ(f[1]["choices"][0]["token_ids"], json::parse("[1]"));
  EXPECT_EQ(f[1]["choices"][0]["logprob_ids"],
            json::parse(R"([{"id":1,"logprob":-2.0,"top":[]}])"));
  // The complete response: every id and its entry.
  s.finish(prompt::FinishReason::kStop);
  json full = json::parse(s.complete({2, 3, 0, 0}));
  EXPECT_EQ(full["choices"][0]["token_ids"], json::parse("[11,12,1]"));
  EXPECT_EQ(full["choices"][0]["logprob_ids"].size(), 3u);
  // Without logprob_ids the field is absent.
  CompletionsResponder plain("cmpl-6", "m", 9, CompletionsChoice{0, 1, false, false, true});
  plain.add_token_ids({11});
  plain.add_logprob_ids({{11, -0.5f, {}}});
  EXPECT_FALSE(json::parse(plain.complete({})).at("choices")[0].contains("logprob_ids"));
}

}  // namespace
}  // namespace fathom::api
