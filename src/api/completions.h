// OpenAI (legacy) Completions, /v1/completions: request JSON -> CompletionsRequest with the
// same typed validation as the Chat adapter (each failure a kInvalidArgument Status whose
// message names the field), and decoded text -> `text_completion` chunks (SSE) and the
// complete response, with `logprobs` in the legacy shape {tokens, token_logprobs,
// top_logprobs, text_offset}. The prompt is continued as is: no chat template.
//
// A CompletionsResponder serves one choice of one response; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api/conversation.h"
#include "api/models.h"
#include "api/structured_output.h"
#include "api/usage.h"
#include "core/status.h"
#include "prompt/output_parser.h"

namespace fathom::api {

struct CompletionsOptions {
  // The names the server answers to; null accepts any `model`.
  const std::vector<ServedModel>* models = nullptr;
  size_t max_body_bytes = 32 << 20;
  // Top-level fields the caller reads from the body itself (the server's test hooks), so they
  // are not reported as unknown.
  std::span<const std::string_view> caller_fields;
};

struct CompletionsRequest {
  std::string model;                // resolved against CompletionsOptions::models when given
  std::string prompt_text;          // `prompt` as a string ...
  std::vector<int32_t> prompt_ids;  // ... or as a list of token ids
  bool prompt_is_ids = false;
  SamplingParams sampling;  // max_tokens defaults to 16 (OpenAI's default); stop, ignore_eos
  int n = 1;                // 1..128
  // Legacy logprobs: the sampled token's log probability and this many alternatives (0..20).
  std::optional<int> logprobs;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage (non-streaming always has usage)
  bool continuous_usage = false;  // vLLM's stream_options.continuous_usage_stats
  // The text of each choice starts with the prompt's (OpenAI's echo; not with logprobs).
  bool echo = false;
  // vLLM's: false writes special tokens (BOS, </think>, ...) into the text as spelled (EOS
  // that ends the output excepted, as in vLLM).
  bool skip_special_tokens = true;
  // vLLM's (>= 0.10.2): each choice also carries its generated `token_ids`, and the prompt's
  // ids as `prompt_token_ids` (in the complete response; on the first chunk of a stream).
  bool return_token_ids = false;
  // vLLM's structured_outputs / guided_* or llama-server's grammar / json_schema.
  StructuredOutput structured;
  // Fathom's: output this request already generated (on another replica, which failed); the
  // server recomputes it as the decode steps that made it and streams only what follows. It
  // counts toward max_tokens. `fathom router` sends it when it moves a request mid-stream.
  std::vector<int32_t> resume_output_ids;
  // Fathom's: which choice of an n-sample run of this request this one is (0..127; only with
  // n = 1). A seeded request draws the random numbers of that choice (keyed by seed,
  // sample_index and absolute position), so choice i of `n: N` is reproduced, or continued
  // with resume_output_ids, by `n: 1, sample_index: i`; `fathom router` sends it to continue
  // one choice of an n > 1 request on another replica. Without a seed it changes nothing.
  int sample_index = 0;
  // vLLM's stop_token_ids: the output ends with the first of these ids generated (it is the
  // output's last token; finish_reason "stop").
  std::vector<int32_t> stop_token_ids;
  // Fathom's id-level fields (what `fathom router` sends its replicas, so that no text crosses
  // that link; README). logprob_ids: each generated id's log probability and this many most
  // likely alternatives (0..20), by id, as the choice's `logprob_ids` beside its `token_ids`
  // (return_token_ids must be true; not together with `logprobs`). -1: not asked.
  int logprob_ids = -1;
  // reasoning_budget (>= 0) with think_end_id: after that many generated tokens without
  // think_end_id, the next token is think_end_id (forced by id). -1: no budget.
  int64_t reasoning_budget = -1;
  // The id that ends reasoning; required by reasoning_budget and grammar_after_think. -1: none.
  int32_t think_end_id = -1;
  // The structured output constraint starts after think_end_id is generated (the reasoning
  // before it is free). Needs a constraint and think_end_id.
  bool grammar_after_think = false;
};

// One generated id's log probability and its most likely alternatives (most likely first), by
// id: Fathom's `logprob_ids` entries {"id", "logprob", "top": [[id, logprob], ...]}; a
// logprob that is not finite is written as null.
struct IdLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// Rejected with a 400 naming the field: batched prompts (more than one prompt in a list),
// echo with logprobs, suffix, best_of other than n and the vLLM extensions this build does not
// implement. Structured outputs: vLLM's fields and llama-server's grammar / json_schema.
// A field no protocol here defines is a 400 naming it, as in the Chat adapter.
Result<CompletionsRequest> parse_completions_request(std::string_view body,
                                                     const CompletionsOptions& options);

// Which choice a responder serves: `index` of `n`; `logprobs` as the request asked.
struct CompletionsChoice {
  int index = 0;
  int n = 1;
  bool logprobs = false;
  bool include_usage = false;
  bool token_ids = false;    // CompletionsRequest::return_token_ids
  bool logprob_ids = false;  // CompletionsRequest::logprob_ids >= 0 (with token_ids)
  // The prompt's ids, sent as prompt_token_ids when token_ids is set.
  std::shared_ptr<const std::vector<int32_t>> prompt_ids;
  bool continuous_usage = false;  // CompletionsRequest::continuous_usage
};

class CompletionsResponder {
 public:
  CompletionsResponder(std::string id, std::string model, int64_t created,
                       CompletionsChoice choice = {})
      : id_(std::move(id)), model_(std::move(model)), created_(created), choice_(choice) {}

  // Streaming: a chunk with `text` (decoded text that is safe to send, after stop matching)
  // and the log probabilities of the tokens behind it. Tokens whose text is still held back
  // (`text` empty) wait for the next call. Empty when there is nothing to send.
  std::string stream(const std::string& text, const std::vector<TokenLogprob>& logprobs = {});
  // With continuous usage: this choice's usage so far, which the next chunks carry.
  void set_usage(const Usage& choice_usage) { live_usage_ = choice_usage; }
  // The generated ids behind the text (when the choice returns token ids): they go out with
  // the next chunk, and fold into the complete response.
  void add_token_ids(const std::vector<int32_t>& ids);
  // Their id-level log probabilities (when the choice returns logprob_ids), one per id given to
  // add_token_ids, in the same order: they travel with those ids.
  void add_logprob_ids(std::vector<IdLogprob> logprobs);
  // The finish chunk (finish_reason "length" for kLength, else "stop"); with n == 1 followed by
  // stream_tail(usage).
  std::string stream_finish(prompt::FinishReason reason, const Usage& usage);
  // The usage chunk (when the request asked for it) and `data: [DONE]`; with n > 1 the server
  // sends it once, after every choice finished.
  std::string stream_tail(const Usage& total) const;
  // Ends the stream with an error instead of a finish (openai_stream_error). Once per response.
  std::string stream_error(const Status& s) const;

  // Folds text and log probabilities into the complete response.
  void add(const std::string& text, const std::vector<TokenLogprob>& logprobs = {});
  void finish(prompt::FinishReason reason);
  // The complete text_completion of a response with this single choice.
  std::string complete(const Usage& usage) const;

  int index() const { return choice_.index; }
  bool finished() const { return finished_; }

 private:
  friend std::string completion_json(const std::vector<CompletionsResponder>& choices,
                                     const Usage& usage);
  // The legacy logprobs object of `tokens`, advancing the text offset; null when not asked.
  pyjson::Value logprobs_json(const std::vector<TokenLogprob>& tokens, int64_t* offset) const;
  pyjson::Value choice_json(const std::string& text, const pyjson::Value& logprobs,
                            const char* finish_reason) const;
  std::string chunk(pyjson::Value choice) const;
  // token_ids: `prompt_token_ids` (the first chunk of a stream, and the complete response;
  // null on later chunks, as vLLM sends it) and `token_ids` on a choice object; with
  // logprob_ids, `logprob_ids` too.
  void set_token_ids(pyjson::Value& choice, const std::vector<int32_t>& ids,
                     const std::vector<IdLogprob>& lps, bool with_prompt) const;

  std::string id_, model_;
  int64_t created_;
  CompletionsChoice choice_;
  Usage live_usage_;
  std::vector<TokenLogprob> pending_;  // tokens whose text has not been sent yet
  std::vector<int32_t> pending_ids_;   // ids not sent yet (streaming, token_ids)
  std::vector<int32_t> token_ids_;     // every generated id (complete response, token_ids)
  std::vector<IdLogprob> pending_lp_ids_, lp_ids_;  // the same for logprob_ids
  bool prompt_ids_sent_ = false;  // streaming, token_ids: prompt_token_ids went out
  int64_t stream_offset_ = 0;     // characters sent so far (text_offset)
  // Folded state.
  std::string text_;
  std::vector<TokenLogprob> logprobs_;
  prompt::FinishReason finish_ = prompt::FinishReason::kEndOfStream;
  bool finished_ = false;
};

// The complete text_completion of a response with n choices (in index order) and one usage
// (completion tokens summed over the choices by the server). REQUIRES: choices is not empty.
std::string completion_json(const std::vector<CompletionsResponder>& choices, const Usage& usage);

}  // namespace fathom::api
