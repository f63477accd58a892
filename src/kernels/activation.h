// The MoE experts' activation in the fast numerics: h = bf16(silu(min(bf16(g), limit)) *
// clamp(bf16(u), -limit, limit) * weight), silu(x) = x / (1 + e^-x) in fp32. ref:: is the
// definition with libm's expf; cpu:: evaluates e^-x by a polynomial (Cephes' expf, within a
// few ulps of it), eight lanes at a time (AVX2, the baseline), so the two may differ by a
// bf16 step of h, rarely. Pure functions; any thread.
#pragma once

#include <cstdint>

namespace fathom::kernels {
namespace ref {
// g and u [n]; h [n] (may alias g).
void swiglu_bf16(const float* g, const float* u, int64_t n, float limit, float weight, float* h);
}  // namespace ref
namespace cpu {
void swiglu_bf16(const float* g, const float* u, int64_t n, float limit, float weight, float* h);
}  // namespace cpu
}  // namespace fathom::kernels
