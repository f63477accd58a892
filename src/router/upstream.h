// The router's wire protocols to its replicas ("upstreams"): what one attempt of a request
// sends and how the streamed answer is read back as token ids, for three kinds of upstream:
//
//   fathom  `fathom serve`'s /v1/completions with Fathom's fields (resume_output_ids,
//           sample_index, retention, cache_salt): continuation after a failure is exact.
//   vllm    vLLM's OpenAI-compatible /v1/completions: a token-id prompt and
//           `return_token_ids: true` (vLLM >= 0.10.2), whose streamed choices carry the
//           generated ids as `token_ids` (and the prompt's as `prompt_token_ids` once).
//   sglang  SGLang's native /generate: `input_ids`, `sampling_params`, `stream: true`, `rid`;
//           each streamed object's `output_ids` holds the ids generated so far (SGLang's
//           default) or, with --incremental-streaming-output, only the new ones: the reader
//           tells them apart by `meta_info.completion_tokens`.
//
// On vllm and sglang a continuation appends the ids already streamed to the prompt (there is
// no resume field), so it is computed as prompt rows rather than decode steps (README).
//
// One choice of an n > 1 request can be continued on its own (build_upstream_call's
// `choice`), as a request of one sample:
//
//   fathom  n = 1 with resume_output_ids = that choice's ids and `sample_index: i` (Fathom's
//           field: the replica draws the random numbers of choice i of an n-sample run), so a
//           seeded choice continues exactly as it would have in the n-sample run.
//   vllm    n = 1 with the choice's ids appended to the prompt and the request's seed. vLLM
//           has no field that selects a sample's random numbers, so a seeded continuation of
//           choice i > 0 is not what the n-sample run would have drawn (nor is any seeded
//           continuation on vllm bit-identical: its generator is per request, not keyed by
//           position).
//   sglang  serves only n = 1 (check_upstream_supports), so only choice 0 exists.
//
// The request features beyond sampling, per kind (a kind that cannot carry one: kUnsupported,
// a 400 naming the client's field, before anything is sent):
//
//   logprobs, K alternatives
//     fathom  logprob_ids: K; each choice chunk's `logprob_ids` [{id, logprob, top: [[id, lp]]}]
//             beside its token_ids (null logprob: -inf)
//     vllm    logprobs: K, return_tokens_as_token_ids; choices[].logprobs {tokens "token_id:N",
//             token_logprobs, top_logprobs {"token_id:N": lp}} (K + 1 entries at most, the
//             sampled one included: sorted, the K most likely kept)
//     sglang  return_logprob, top_logprobs_num: K; meta_info.output_token_logprobs
//             [[lp, id, text]], output_top_logprobs [[[lp, id, text]]] (cumulative or
//             incremental, as output_ids)
//   stop token ids
//     fathom, vllm: stop_token_ids; sglang: sampling_params.stop_token_ids
//   reasoning budget
//     fathom  reasoning_budget + think_end_id (the engine forces that id)
//     vllm    thinking_token_budget (what is left of it on a continuation; vLLM's reasoning
//             config must name </think>)
//     sglang  none: a 400
//   structured outputs and strict tools
//     fathom  grammar_spec: the source the router's server compiled (kind json_schema | regex
//             | gbnf | choice | dsml, text or choices, the JSON options), compiled again by the
//             replica against its vocabulary; grammar_after_think + think_end_id
//     vllm    structured_outputs {json (+ disable_any_whitespace,
//             disable_additional_properties) | regex | choice | grammar}; strict tools: a 400
//     sglang  sampling_params.json_schema | regex | ebnf (choices as an EBNF alternation);
//             strict tools: a 400
//
// Fathom replicas compute every feature exactly as `fathom serve` alone would (the replica
// compiles the spec with its own vocabulary; logprobs come back by id and the router's server
// renders them). On vllm and sglang the semantics are the upstream's: JSON whitespace and
// additionalProperties policy, logprobs (vLLM's are of the raw distribution by default), and a
// constraint after reasoning, which there follows the upstream's --reasoning-parser.
// Logprobs at or below -9999 (vLLM's and SGLang's stand-ins for -inf) are read as -inf.
// (vLLM: entrypoints/openai/protocol.py CompletionRequest, sampling_params.py
// StructuredOutputsParams, serving_completion.py _create_completion_logprobs; SGLang:
// managers/io_struct.py GenerateReqInput, sampling/sampling_params.py, tokenizer_manager.py
// detokenize_logprob_tokens and _INCREMENTAL_STREAMING_META_INFO_KEYS.)
//
// Plain functions and a reader that belongs to one attempt (one thread); nothing is shared.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/request.h"

namespace fathom::pyjson {
struct Value;
}

namespace fathom::router {

enum class UpstreamKind { kFathom, kVllm, kSglang };

// "fathom", "vllm" or "sglang"; kInvalidArgument otherwise.
Result<UpstreamKind> parse_upstream_kind(std::string_view name);
const char* upstream_kind_name(UpstreamKind kind);

// The tenant string a request of tenant hash `salt` (GenerationRequest::cache_salt, nonzero)
// carries upstream: cache_salt (fathom, vllm) or extra_key (sglang), "fathom-router-<16 hex>".
std::string upstream_salt_name(uint64_t salt);
// The salt a Fathom replica's prefix cache keys that request's blocks with
// (kv::tenant_salt of upstream_salt_name; 0 for no tenant), so the router computes the very keys
// the replica's KV events carry: kv::prefix_block_hashes(prompt, 128, replica_block_salt(salt)).
uint64_t replica_block_salt(uint64_t salt);

// kUnsupported (a 400 naming the field) when `kind` cannot serve a request of n samples like
// `req`: sglang serves one sample per request (n > 1 would need its own seeding), no reasoning
// budget; neither vllm nor sglang has strict tools (a DSML grammar) or a client's
// `sample_index` (GenerationRequest::sample_index other than 0); a grammar without its source
// (GenerationRequest::grammar_spec) cannot be sent at all.
Status check_upstream_supports(UpstreamKind kind, const engine::GenerationRequest& req, int n);

// What one attempt sends.
struct UpstreamCall {
  std::string path;  // "/v1/completions" or "/generate"
  std::string body;  // JSON
};

// One attempt of `req` (n samples) after `sofar` ids were already streamed to the client
// (continuation; empty on a first try). `retention` is the class name (fathom only);
// `request_id` names the attempt (sglang's rid).
//
// `choice` -1: the attempt serves all n choices (with n = 1, a fathom body carries the
// request's own GenerationRequest::sample_index when it is not 0). `choice` i >= 0: the
// attempt serves only choice i of the n, as a request of one sample (no `n` field), and
// `sofar` is that choice's ids so far; its answer is one choice (read it with an
// UpstreamStreamReader of n = 1: its choice 0 is choice i). For fathom the body then carries
// `sample_index: i` (omitted when i is 0, so choice 0 of n and a plain n = 1 attempt send the
// same body; with n = 1 it is req.sample_index, whatever `choice`); for vllm see the header
// comment.
//
// REQUIRES: check_upstream_supports(kind, req, n) passed; sofar.size() < req.max_tokens;
// -1 <= choice < n; a non-empty `sofar` with n > 1 only together with a choice.
UpstreamCall build_upstream_call(UpstreamKind kind, const engine::GenerationRequest& req, int n,
                                 std::span<const int32_t> sofar, const std::string& retention,
                                 const std::string& request_id, int choice = -1);

// Reads one attempt's streamed answer (the body's lines, `data: ...` SSE events) into token
// ids per choice. Anything the upstream sends that is not what its protocol promises — bad
// JSON, a missing or mistyped field, an id outside the vocabulary, output ids that do not
// extend what came before, a finish it does not know — is an error naming what was wrong;
// an error event the upstream sends is an error with its message. Either way the attempt
// failed: the reader never turns a broken answer into a finish.
class UpstreamStreamReader {
 public:
  // `prompt` is what the attempt sent (for the checks of prompt_token_ids / prompt_tokens);
  // `top_logprobs` what the request asked (GenerationRequest::top_logprobs; -1: none): then
  // every new id must come with its log probability and at most that many alternatives.
  UpstreamStreamReader(UpstreamKind kind, int n, int64_t vocab_size,
                       std::span<const int32_t> prompt, int top_logprobs = -1);

  struct Update {
    size_t choice = 0;
    std::vector<int32_t> tokens;  // new ids
    // With top_logprobs >= 0: one per token, same order (alternatives most likely first).
    std::vector<engine::TokenLogprob> logprobs;
    // kEos or kLength when the choice finished with this update, else kNone.
    engine::FinishCause cause = engine::FinishCause::kNone;
  };
  // Feeds one line of the body (without its newline). Appends what it carried to *out.
  // kCorrupt naming the fault for a malformed event; kInvalidArgument with the upstream's
  // message for an error event that blames the request (invalid_request_error,
  // BadRequestError, code 400), kIoError for any other.
  Status feed(std::string_view line, std::vector<Update>* out);
  // The end-of-stream marker (`data: [DONE]`) was read.
  bool done() const { return done_; }
  // Prompt tokens the upstream reported as served from its cache, once reported.
  std::optional<int64_t> cached_tokens() const { return cached_; }

 private:
  Status feed_completions(const pyjson::Value& ev, std::vector<Update>* out);
  Status feed_generate(const pyjson::Value& ev, std::vector<Update>* out);
  // The log probabilities of a choice's new ids `up.tokens` into up.logprobs: Fathom's
  // logprob_ids, vLLM's logprobs object.
  Status read_fathom_logprobs(const pyjson::Value* v, Update& up) const;
  Status read_vllm_logprobs(const pyjson::Value* v, Update& up) const;
  // SGLang's: entries [from, from + up.tokens.size()) of meta_info's lists.
  Status read_sglang_logprobs(const pyjson::Value& meta, size_t from, Update& up) const;

  UpstreamKind kind_;
  int n_;
  int top_logprobs_;
  int64_t vocab_;
  std::span<const int32_t> prompt_;
  std::vector<char> finished_;       // per choice
  std::vector<int32_t> sglang_ids_;  // sglang: every id read (to check cumulative chunks)
  std::optional<int64_t> cached_;
  bool done_ = false;
};

}  // namespace fathom::router
