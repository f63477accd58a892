#include "engine/output_processor.h"

#include <algorithm>

namespace fathom::engine {

int32_t OutputProcessor::next_token(const GenerationRequest& r, uint64_t request_key,
                                    std::span<const int32_t> generated, bool think_ended,
                                    const float* logits, TokenLogprob* logprob) {
  const int64_t g = int64_t(generated.size());
  int32_t tok = 0;
  if (g < int64_t(r.forced_output.size()))
    tok = r.forced_output[size_t(g)];
  else if (r.think_end_id >= 0 && r.reasoning_budget >= 0 && !think_ended &&
           g >= r.reasoning_budget)
    tok = r.think_end_id;  // the reasoning budget is spent
  else
    tok = sample_token(logits, vocab_, r.sampling, r.prompt, generated, request_key,
                       uint64_t(r.prompt.size()) + uint64_t(g), scratch_);
  if (logprob)
    token_logprob(logits, vocab_, r.sampling, r.prompt, generated, tok, r.top_logprobs, scratch_,
                  logprob);
  return tok;
}

FinishCause OutputProcessor::stop_cause(const GenerationRequest& r,
                                        std::span<const int32_t> generated) const {
  if (generated.empty()) return FinishCause::kNone;
  const int32_t tok = generated.back();
  if (tok == eos_ && !r.ignore_eos) return FinishCause::kEos;
  if (std::find(r.stop_ids.begin(), r.stop_ids.end(), tok) != r.stop_ids.end())
    return FinishCause::kStopToken;
  if (int64_t(generated.size()) >= r.max_tokens) return FinishCause::kLength;
  return FinishCause::kNone;
}

}  // namespace fathom::engine
