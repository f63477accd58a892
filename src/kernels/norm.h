// RMSNorm and the bf16 conversions around it. ref:: is the strict (canonical) arithmetic of
// the golden data — squares rounded to fp32, their mean accumulated in double and rounded
// once, rsqrt evaluated in double and rounded to fp32, then fp32 products — and cpu:: the
// AVX2 fp32 version tested against it. Pure functions.
#pragma once

#include <cstdint>

namespace fathom::kernels {

// Round-to-nearest-even float -> bf16 (as torch's .to(bfloat16)); NaN stays NaN (quiet).
// Branch-free, so that loops over it vectorise.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}
inline float round_to_bf16(float f);
// A double rounded to bf16 the way torch casts it: to fp32 first, then to bf16 (c10::BFloat16
// is built from a float). The two roundings differ from one direct rounding when the fp32 step
// lands exactly on a bf16 midpoint; the golden data follow torch (one attention row of the
// tiny model's layer 2 depends on it).
float round_double_to_bf16(double v);

namespace ref {
// y[r] = bf16(weight * (x[r] * rsqrt(mean(x[r]^2) + eps))) for `rows` rows of `dim`.
void rmsnorm_bf16(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                  float* y);
// y[r, m] = sum_k x[r, k] w[m, k], accumulated in double, rounded to fp32 (an fp32 linear).
void linear_f32(const float* x, const float* w, int64_t rows, int64_t k, int64_t m, float* y);
}  // namespace ref

namespace cpu {
void rmsnorm_bf16(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                  float* y);
}  // namespace cpu

inline float round_to_bf16(float f) {
  uint32_t u = uint32_t(float_to_bf16(f)) << 16;
  float r;
  __builtin_memcpy(&r, &u, 4);
  return r;
}

}  // namespace fathom::kernels
