// The activation fake-quant of the fast numerics: ref::fake_quant_e4m3's values, computed on
// the floats' bits without libm calls or branches, and ref::fake_quant_e2m1's by comparisons,
// eight lanes at a time (AVX2, the baseline). Compiled for the baseline.
#include <immintrin.h>

#include <algorithm>
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

}  // namespace

void fake_quant_e4m3(const float* x, int64_t n, float* y) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign_mask = _mm256_set1_epi32(int(0x80000000u));
  for (int64_t b = 0; b < n; b += 32) {
    __m256 v[4];
    // amax as std::max keeps it (a NaN never replaces it: maxps returns its second operand
    // when either is NaN).
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(x + b + 8 * j);
      m = _mm256_max_ps(_mm256_and_ps(v[j], abs_mask), m);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float amax = 0.0f;
    for (float l : lanes) amax = amax < l ? l : amax;
    // scale = 2^ceil(log2(v)), v = max(amax, 1e-4) / 448 (a normal float): the exponent of
    // v, one more unless v is a power of two.
    const float vs = (amax > 1e-4f ? amax : 1e-4f) * (1.0f / 448.0f);
    const uint32_t vb = bits(vs);
    const uint32_t e = (vb >> 23) + ((vb & 0x7FFFFFu) != 0 ? 1u : 0u);
    const __m256 scale = _mm256_set1_ps(from_bits(e << 23)),
                 inv = _mm256_set1_ps(from_bits((254u - e) << 23));
    for (int j = 0; j < 4; ++j) {
      const __m256 a = _mm256_mul_ps(_mm256_and_ps(v[j], abs_mask), inv);  // |x| / scale, exact
      // Above 2^-6: 3 mantissa bits, ties to even, by a carry into bit 20.
      const __m256i ai = _mm256_castps_si256(a);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(ai, 20), _mm256_set1_epi32(1));
      const __m256 normal = _mm256_castsi256_ps(
          _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(ai, _mm256_set1_epi32(0x7FFFF)), lsb),
                           _mm256_set1_epi32(int(0xFFF00000u))));
      // Below: fp32's grid at 2^14 is E4M3's subnormal grid.
      const __m256 big = _mm256_set1_ps(16384.0f);
      const __m256 sub = _mm256_sub_ps(_mm256_add_ps(a, big), big);
      __m256 q =
          _mm256_blendv_ps(normal, sub, _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ));
      q = _mm256_min_ps(q, _mm256_set1_ps(448.0f));
      q = _mm256_blendv_ps(q, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));  // NaN stays NaN
      const __m256i out = _mm256_or_si256(_mm256_castps_si256(_mm256_mul_ps(q, scale)),
                                          _mm256_and_si256(_mm256_castps_si256(v[j]), sign_mask));
      _mm256_storeu_ps(y + b + 8 * j, _mm256_castsi256_ps(out));
    }
  }
}

void fake_quant_e2m1(const float* x, int64_t n, int64_t block, bool e4m3_scale, float* y) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(int(0x80000000u)));
  const __m256 six = _mm256_set1_ps(6.0f), minus_six = _mm256_set1_ps(-6.0f);
  // E2M1's rounding (ties to the even code): > at .25, 1.25, 2.5, 5 and >= at .75, 1.75, 3.5,
  // each boundary leading to the next magnitude. (The comparison's predicate must be an
  // immediate, so the steps are written out.)
  auto above = [](__m256 a, float at) { return _mm256_cmp_ps(a, _mm256_set1_ps(at), _CMP_GT_OQ); };
  auto from = [](__m256 a, float at) { return _mm256_cmp_ps(a, _mm256_set1_ps(at), _CMP_GE_OQ); };
  for (int64_t b = 0; b < n; b += block) {
    __m256 acc = _mm256_setzero_ps();  // max_ps(|x|, acc) keeps acc for a NaN, as std::max
    for (int64_t i = b; i < b + block; i += 8)
      acc = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), acc);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    float amax = 0.0f;
    for (float l : lanes) amax = std::max(amax, l);
    const float scale = e2m1_block_scale(amax, e4m3_scale);
    const __m256 scale_v = _mm256_set1_ps(scale);
    const __m256 inverse = _mm256_set1_ps(1.0f / scale);  // exact for a power of two
    for (int64_t i = b; i < b + block; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
      __m256 q = e4m3_scale ? _mm256_div_ps(xv, scale_v) : _mm256_mul_ps(xv, inverse);
      // std::clamp(q, -6, 6): NaN stays.
      q = _mm256_blendv_ps(q, six, _mm256_cmp_ps(six, q, _CMP_LT_OQ));
      q = _mm256_blendv_ps(q, minus_six, _mm256_cmp_ps(q, minus_six, _CMP_LT_OQ));
      const __m256 a = _mm256_and_ps(q, abs_mask);
      __m256 mag = _mm256_setzero_ps();
      mag = _mm256_blendv_ps(mag, _mm256_set1_ps(0.5f), above(a, 0.25f));
      mag = _mm256_blendv_ps(mag, _mm256_set1_ps(1.0f), from(a, 0.75f));
      mag = _mm256_blendv_ps(mag, _mm256_set1_ps(1.5f), above(a, 1.25f));
      mag = _mm256_blendv_ps(mag, _mm256_set1_ps(2.0f), from(a, 1.75f));
      mag = _mm256_blendv_ps(mag, _mm256_set1_ps(3.0f), above(a, 2.5f));
      mag = _mm256_blendv_ps(mag, _mm256_set1_ps(4.0f), from(a, 3.5f));
      mag = _mm256_blendv_ps(mag, _mm256_set1_ps(6.0f), above(a, 5.0f));
      __m256 r = _mm256_or_ps(mag, _mm256_and_ps(q, sign_mask));
      r = _mm256_blendv_ps(r, q, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));  // a NaN is itself
      _mm256_storeu_ps(y + i, _mm256_mul_ps(r, scale_v));
    }
  }
}

}  // namespace fathom::kernels::cpu
