// OutputProcessor: turns a sequence's logits row into its next token and decides whether the
// request ends there — forced tokens (teacher forcing, then the reasoning budget's think-end
// id), sampling, logprobs when asked for, EOS, stop ids, max_tokens and the injected-error
// testing hook. Plain data in and out; the engine keeps the sequences and sends the events.
//
// Owned by the engine; used by its executor thread only (it holds the sampler's scratch).
#pragma once

#include <cstdint>
#include <span>

#include "engine/request.h"
#include "engine/sampler.h"

namespace fathom::engine {

class OutputProcessor {
 public:
  // `eos_id` < 0: no EOS.
  OutputProcessor(int32_t eos_id, int64_t vocab) : eos_(eos_id), vocab_(vocab) {}

  // True when the request's injected error is due before its next token.
  static bool error_due(const GenerationRequest& r, int64_t generated) {
    return r.inject_error_after >= 0 && generated >= r.inject_error_after;
  }
  // The next token after `generated` from `logits` [vocab]: the next forced output token, else
  // think_end_id once the reasoning budget is spent (`think_ended`: it was generated), else a
  // sample keyed by (seed, `request_key`, position). Fills `logprob` when non-null.
  int32_t next_token(const GenerationRequest& r, uint64_t request_key,
                     std::span<const int32_t> generated, bool think_ended, const float* logits,
                     TokenLogprob* logprob);
  // Why the request ends after `generated` (its newest token last); kNone to go on.
  FinishCause stop_cause(const GenerationRequest& r, std::span<const int32_t> generated) const;

 private:
  const int32_t eos_;
  const int64_t vocab_;
  SamplerScratch scratch_;
};

}  // namespace fathom::engine
