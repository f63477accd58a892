// What a request asks of the engine (GenerationRequest) and what it gets back (StreamEvent):
// plain data, copied between the caller's thread and the engine's.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"

namespace fathom::engine {

enum class FinishCause { kNone, kEos, kStopToken, kLength, kCancelled, kError };

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  bool seeded = false;  // sampling.seed was given by the client
  int64_t max_tokens = 256;
  std::vector<int32_t> stop_ids;  // besides the model's EOS
  uint64_t cache_salt = 0;        // tenant/model salt of the prefix-cache hashes
  bool ignore_eos = false;
  // Testing aid (servers expose it only when asked to): the first generated tokens are these
  // instead of samples (teacher forcing; the model still runs on them).
  std::vector<int32_t> forced_output;
  // -1: no logprobs; 0..20: every event carries each token's logprob (see token_logprob() in
  // sampler.h) plus this many most likely alternatives.
  int top_logprobs = -1;
  // With think_end_id >= 0: after this many generated tokens without think_end_id, the next
  // token is think_end_id (forced by id, not sampled). -1 = no budget.
  int64_t reasoning_budget = -1;
  int32_t think_end_id = -1;
  // Testing hook: the request fails with an internal error (a kError final event) after
  // emitting this many tokens (0 = before the first). -1 = off.
  int64_t inject_error_after = -1;
  // Which of n samples of one prompt this is (submit_n sets it): a seeded request draws its
  // random numbers keyed by (seed, sample_index, position).
  int32_t sample_index = 0;
};

// What a request sees: batches of new tokens, then one final event (which may carry the last
// tokens too). A consumer that passes the same StreamEvent to next()/try_next() every time
// hands its buffers back to the stream, so that steady streaming allocates nothing.
struct StreamEvent {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // one per token when requested, same order as tokens
  bool finished = false;
  FinishCause cause = FinishCause::kNone;
  Status error;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double queue_seconds = 0, first_token_seconds = 0;  // set on the first token event
};

}  // namespace fathom::engine
