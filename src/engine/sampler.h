// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, repetition /
// presence / frequency penalties. Random numbers come from a counter-based generator keyed by
// (seed, request, position), so a seeded request draws the same numbers whether it runs
// alone or in any batch, on any thread. Pure functions; the scratch buffer is the caller's.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace fathom::engine {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, ties to the lower id); so is a T
                                    // whose 1/T overflows a float (the limit)
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // HF/vLLM style: divides positive logits, multiplies negative
  float presence_penalty = 0.0f;    // OpenAI style, over generated tokens
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
};

// A request's own changes to a logits row before the penalties (vLLM's order): the `banned`
// ids (min_tokens, bad_words) are set to -inf, then each (id, bias) of `bias` (OpenAI's
// logit_bias, ascending ids) is added. The spans point at the caller's data for one call.
struct LogitAdjust {
  std::span<const std::pair<int32_t, float>> bias;
  std::span<const int32_t> banned;
  bool empty() const { return bias.empty() && banned.empty(); }
};

// A uniform double in [0, 1) determined by (seed, request, position) alone.
double counter_uniform(uint64_t seed, uint64_t request, uint64_t position);

// Buffers sample_token() reuses from call to call (no allocation per token once grown).
// One per calling thread.
struct SamplerScratch {
  std::vector<float> logits, prob, prob2;
  std::vector<int32_t> cand, cand2, counts;
  std::vector<size_t> order;
  std::vector<uint8_t> seen;
};

// One generated token's log-probability and the most likely alternatives at its position.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  int32_t top_count = 0;                            // entries used in `top`
  std::array<std::pair<int32_t, float>, 20> top{};  // (id, logprob), most likely first
};
inline constexpr int kMaxTopLogprobs = 20;

// Samples one token from `logits` changed by `adjust`. `prompt` and `generated` feed the
// penalties (repetition over both,
// presence/frequency over the generated tokens). `allowed` (ascending ids; empty: every id)
// restricts the draw to those ids: the token is the one sampling `logits` with every other id
// at -inf gives, for the same key (a structured-output mask without the pass over the whole
// vocabulary).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p,
                     std::span<const int32_t> prompt, std::span<const int32_t> generated,
                     uint64_t request, uint64_t position, SamplerScratch& scratch,
                     std::span<const int32_t> allowed = {}, const LogitAdjust& adjust = {});

// The log-probability of `token` and of the `top_n` (0..20) most likely ids (descending, ties
// to the lower id) under the distribution the sampler draws from before truncation: the
// log-softmax of the logits after the penalties, divided by the temperature, before top-k,
// top-p and min-p. At temperature 0 (greedy) the logits after the penalties are taken as they
// are (temperature 1): without penalties, log_softmax(raw logits). Costs one pass over the
// vocabulary (plus a copy when penalties apply); the engine calls it only for requests that
// ask for logprobs.
void token_logprob(const float* logits, int64_t vocab, const SamplingParams& p,
                   std::span<const int32_t> prompt, std::span<const int32_t> generated,
                   int32_t token, int top_n, SamplerScratch& scratch, TokenLogprob* out,
                   const LogitAdjust& adjust = {});

}  // namespace fathom::engine
