// The DSpark Markov head's bias (shared/spec/model-v41.md §6.9): logits[v] += float(Σ_r
// double(head[v, r]) · double(embed[r])), the sum in double in the order of r, as DeepSeek's
// reference computes it. ref:: is that loop; cpu:: computes sixteen v at a time in AVX2
// double lanes (the baseline) with fused multiply-adds — the same bits, since the product of
// two floats is exact in double, so rounding the sum once is what the reference rounds. Pure
// functions; any thread.
#pragma once

#include <cstdint>

namespace fathom::kernels {
namespace ref {
// head [V, R] row-major; embed [R]; logits [V] (added to).
void markov_bias(const float* head, int64_t V, int64_t R, const float* embed, float* logits);
}  // namespace ref
namespace cpu {
void markov_bias(const float* head, int64_t V, int64_t R, const float* embed, float* logits);
}  // namespace cpu
}  // namespace fathom::kernels
