// The activation fake-quant of the fast numerics: ref::fake_quant_e4m3's values, computed on
// the floats' bits without libm calls or branches (the compiler vectorises the loops).
// Compiled for the baseline.
#include <cstdint>

#include "kernels/quant.h"

namespace fathom::kernels::cpu {
namespace {

inline uint32_t bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// |v| rounded to E4M3 (ties to even), saturated at 448 (NaN stays NaN). Above E4M3's smallest
// normal 2^-6 the grid keeps 3 mantissa bits: add half a step (less one, plus the kept lsb)
// at bit 20 and clear the bits below (a carry into the exponent is the right rounding).
// Below it the grid is 2^-9 apart, fp32's own grid at 2^14: adding and subtracting 2^14
// rounds there.
inline float round_e4m3_abs(float a) {
  const uint32_t u = bits(a);
  const float normal = from_bits((u + 0x7FFFFu + ((u >> 20) & 1u)) & 0xFFF00000u);
  const float sub = (a + 16384.0f) - 16384.0f;  // IEEE arithmetic: never folded to a
  const float q = a < 0x1p-6f ? sub : normal;
  return a != a ? a : q < 448.0f ? q : 448.0f;
}

}  // namespace

void fake_quant_e4m3(const float* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + 32; ++i) {
      const float a = from_bits(bits(x[i]) & 0x7FFFFFFFu);
      amax = amax < a ? a : amax;  // std::max's choice, as the reference
    }
    // scale = 2^ceil(log2(v)), v = max(amax, 1e-4) / 448 (a normal float): the exponent of
    // v, one more unless v is a power of two.
    const float v = (amax > 1e-4f ? amax : 1e-4f) * (1.0f / 448.0f);
    const uint32_t vb = bits(v);
    const uint32_t e = (vb >> 23) + ((vb & 0x7FFFFFu) != 0 ? 1u : 0u);
    const float scale = from_bits(e << 23), inv = from_bits((254u - e) << 23);
    for (int64_t i = b; i < b + 32; ++i) {
      const uint32_t xb = bits(x[i]);
      const float a = from_bits(xb & 0x7FFFFFFFu) * inv;  // |x| / scale, exact
      y[i] = from_bits(bits(round_e4m3_abs(a) * scale) | (xb & 0x80000000u));
    }
  }
}

}  // namespace fathom::kernels::cpu
