// E4M3 rounding and the activation fake-quant, in exact scalar arithmetic.
#include <algorithm>
#include <cmath>

#include "kernels/quant.h"

namespace fathom::kernels {

float round_to_e4m3(float v) {
  const float a = std::fabs(v);
  if (!(a < 448.0f)) return std::isnan(v) ? v : std::copysign(448.0f, v);
  if (a == 0.0f) return v;
  int e;
  std::frexp(a, &e);        // a = m * 2^e, m in [0.5, 1)
  e = std::max(e - 1, -6);  // E4M3's smallest normal exponent; below, the subnormal grid
  const double step = std::ldexp(1.0, e - 3);                // 3 mantissa bits
  const double q = std::nearbyint(double(a) / step) * step;  // ties to even (default mode)
  return std::copysign(float(std::min(q, 448.0)), v);
}

float round_to_e2m1(float v) {
  const float a = std::fabs(v);
  float q;
  if (!(a <= 5.0f))
    q = std::isnan(v) ? v : 6.0f;
  else if (a >= 3.5f)
    q = 4.0f;
  else if (a > 2.5f)
    q = 3.0f;
  else if (a >= 1.75f)
    q = 2.0f;
  else if (a > 1.25f)
    q = 1.5f;
  else if (a >= 0.75f)
    q = 1.0f;
  else if (a > 0.25f)
    q = 0.5f;
  else
    q = 0.0f;
  return std::copysign(q, v);
}

float e2m1_block_scale(float amax, bool e4m3_scale) {
  if (e4m3_scale) return round_to_e4m3(std::max(amax, 6.0f * 0x1p-9f) / 6.0f);
  const float v = std::max(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f);
  int e;
  const float m = std::frexp(v, &e);  // ceil(log2(v)) is e, or e - 1 for an exact power of 2
  return std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
}

namespace ref {

void fake_quant_e4m3(const float* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float v = std::max(amax, 1e-4f) * (1.0f / 448.0f);
    int e;
    const float m = std::frexp(v, &e);  // ceil(log2(v)) is e, or e - 1 for an exact power of 2
    const float scale = std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
    for (int64_t i = b; i < b + 32; ++i) y[i] = round_to_e4m3(x[i] / scale) * scale;
  }
}

void fake_quant_e2m1(const float* x, int64_t n, int64_t block, bool e4m3_scale, float* y) {
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = e2m1_block_scale(amax, e4m3_scale);
    for (int64_t i = b; i < b + block; ++i)
      y[i] = round_to_e2m1(std::clamp(x[i] / scale, -6.0f, 6.0f)) * scale;
  }
}

}  // namespace ref
}  // namespace fathom::kernels
