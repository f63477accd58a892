// The V4.1 MoE experts (shared/spec/model-v41.md §6.6, ref `Expert`, `MoE`) in the strict
// arithmetic of the golden data: activations fake-quantised to E4M3 per 32 before every
// FP8/FP4 GEMM, GEMM outputs rounded once to bf16, SwiGLU with the clamp in fp32, the
// routed weight applied before W2, the hidden rounded to bf16, routed outputs summed in fp32
// in expert-index order, the shared expert added, the result rounded to bf16.
// ExpertWeights are views into a mapped checkpoint (it must outlive them). moe_forward is
// pure: any thread.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/gemv.h"

namespace fathom {
class ThreadPool;
}

namespace fathom::model {

class Checkpoint;

// One expert's three projections: w1 (gate) and w3 (up) hidden -> inter, w2 inter -> hidden.
// Routed experts are FP4, the shared expert FP8; `fp4` says which.
struct ExpertWeights {
  bool fp4 = true;
  kernels::Fp4Matrix w1_fp4{}, w2_fp4{}, w3_fp4{};
  kernels::Fp8Matrix w1_fp8{}, w2_fp8{}, w3_fp8{};
  int64_t hidden = 0, inter = 0;
};

struct MoeWeights {
  std::vector<ExpertWeights> routed;
  ExpertWeights shared;
  float swiglu_limit = 10.0f;
};

// Views of `prefix` + "experts.E.w{1,2,3}" and "shared_experts.w{1,2,3}" (e.g. prefix
// "layers.9.ffn."), checked for presence, dtype and shape.
Result<MoeWeights> moe_weights(const Checkpoint& ck, const std::string& prefix, int n_routed,
                               int64_t hidden, int64_t inter, float swiglu_limit);

// y [hidden] = the MoE output for one token's normed FFN input x [hidden] routed to
// `experts` with `weights` (k of each). Scratch is on the stack; hidden, inter <= 8192.
void moe_forward(const MoeWeights& w, const float* x, const int32_t* experts, const float* weights,
                 int k, float* y);

// The `fast` numerics for T tokens at once: the same rounding points and fake-quant, fp32
// accumulation in the fast kernels, each expert run over the tokens routed to it in pieces of
// up to 256 rows, the pieces side by side over `pool` (may be null), one thread each. x, y
// [T, hidden]; experts, weights [T, k]. Buffers are per calling thread and reused.
void moe_forward_fast(const MoeWeights& w, const float* x, int64_t T, const int32_t* experts,
                      const float* weights, int k, float* y, ThreadPool* pool);

}  // namespace fathom::model
