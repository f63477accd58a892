// The V4.1 MoE router (shared/spec/model-v41.md §6.6, ref `Gate`): scores
// s = sqrt(softplus(W_g · x)), the top-k experts of s + bias (bias steers selection only), and
// their weights s / (Σ s + 1e-20) · route_scale. Strict arithmetic as the golden data: the fp32
// linear accumulated in double, softplus (threshold 20) in double rounded to fp32; ties in
// top-k go to the lower expert index. Pure function; no allocation; any thread.
#pragma once

#include <cstdint>

namespace fathom::model {

inline constexpr int kMaxExperts = 512;

struct MoeGateParams {
  const float* weight = nullptr;  // [n_experts, hidden], the checkpoint's BF16 values as fp32
  const float* bias = nullptr;    // [n_experts]
  int64_t hidden = 0;
  int n_experts = 0;  // at most kMaxExperts
  int top_k = 0;      // at most n_experts
  float route_scale = 1.0f;
};

// Routes one token: x is the normed FFN input [hidden]; writes top_k expert ids (highest
// biased score first) and their weights. `fast`: the linear's double sums in eight lanes
// (exact products; only the order of the double additions differs, so the fp32 logits
// almost always equal the strict ones).
void route_token(const float* x, const MoeGateParams& p, int32_t* experts, float* weights,
                 bool fast = false);
// route_token(fast) of `rows` tokens x [rows, hidden] into experts and weights [rows, top_k],
// bit for bit: the gate's sums of up to eight tokens per pass over its weights
// (kernels::cpu::dots_f64_lanes; the squares' sums it also takes are not used).
void route_tokens_fast(const float* x, int64_t rows, const MoeGateParams& p, int32_t* experts,
                       float* weights);

}  // namespace fathom::model
