// mHC (manifold-constrained hyper-connections), the residual mixing around every V4.1
// sublayer (shared/spec/model-v41.md §6.2): HcMix turns the 4-stream residual into the input
// mix `pre`, the output gains `post` and the doubly stochastic stream mix `comb`
// (Sinkhorn); hc_pre and hc_post apply them. This is the strict arithmetic of the golden data
// (double-accumulated reductions rounded once, transcendentals in double rounded to fp32,
// the reference's fp32/bf16 rounding points), so it reproduces the reference bit for bit.
// Pure functions; no allocation; any thread.
#pragma once

#include <cstdint>

namespace fathom {
class ThreadPool;
}

namespace fathom::model {

inline constexpr int kHcStreams = 4;

// One HcMix site's parameters: fn [24, 4*hidden] (row-major fp32), scale [3], base [24].
struct HcMixParams {
  const float* fn = nullptr;
  const float* scale = nullptr;
  const float* base = nullptr;
  int64_t hidden = 0;
  int sinkhorn_iters = 20;     // normalisation rounds in total
  float norm_eps = 1e-20f;     // inside rsqrt(mean(v^2) + eps)
  float sinkhorn_eps = 1e-6f;  // pre/comb offsets and Sinkhorn divisors
};

struct HcMix {
  float pre[kHcStreams];
  float post[kHcStreams];
  float comb[kHcStreams][kHcStreams];  // comb[i][j]: weight of input stream i in output j
};

// The mix for one token from its residual streams X [4, hidden] (bf16 values held as fp32).
HcMix hc_mix(const float* streams, const HcMixParams& p);
// The `fast` numerics: the same arithmetic with the double sums taken in eight lanes (the
// mix is too sensitive for fp32 sums: they double the fast path's logit error).
HcMix hc_mix_fast(const float* streams, const HcMixParams& p, ThreadPool* pool = nullptr);
// hc_mix_fast() of `rows` tokens (streams [rows, 4, hidden]) into out[rows], bit for bit: the
// 25 sums of up to eight tokens at once by kernels::cpu::dots_f64_lanes.
void hc_mix_fast_rows(const float* streams, int64_t rows, const HcMixParams& p, HcMix* out);

// x = bf16(sum_j pre[j] * X[j]): the sublayer input, [hidden].
void hc_pre(const float* pre, const float* streams, int64_t hidden, float* x);

// X'[j] = bf16(post[j] * y + sum_i comb[i][j] * X[i]) for the sublayer output y [hidden];
// `streams` and `out` are [4, hidden] and may not alias.
void hc_post(const HcMix& mix, const float* sublayer_out, const float* streams, int64_t hidden,
             float* out);

}  // namespace fathom::model
