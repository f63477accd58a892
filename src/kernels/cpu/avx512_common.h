// Small AVX-512 helpers the files compiled with AVX-512 flags share (gemv_avx512.cc,
// gemm_avx512bf16.cc, attention_avx512bf16.cc, attention_amx.cc). Private to kernels/cpu;
// include only from files compiled with -mavx512f/bw/vl (it uses their intrinsics inline).
// Every function is static: each object keeps its own copy, with no symbol a baseline file
// could be linked against (tests/kernels/wide_path_symbols.sh).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace fathom::kernels::cpu::avx512_common {

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Calls fn.template operator()<N>() with N = n for n < Max and N = Max otherwise: the
// compile-time row or head counts the wide kernels unroll by. REQUIRES: n >= 1.
template <int Max, class Fn>
static inline void with_count(int64_t n, const Fn& fn) {
  if constexpr (Max > 1) {
    if (n < Max) {
      with_count<Max - 1>(n, fn);
      return;
    }
  }
  fn.template operator()<Max>();
}

// The FP8 and FP4 GEMVs walk their rows [r0, r1) as two streams, [r0, r0 + h) and
// [r0 + h, r1): pass(a, b, two) for one row of each, a lone last row as pass(a, a, false) (computed
// twice, stored once). Weights come from memory in decode, and there the order decides the
// speed: four adjacent rows a pass read far below the machine's bandwidth (on a Zen 4, rows
// shorter than a 4 KiB page share pages, which seems to defeat the hardware's stream
// prefetch; figures in gemm_avx512bf16.cc). A row's sum does not depend on the order, so the
// results are the same bit for bit.
template <class Pass>
static inline void two_streams(int64_t r0, int64_t r1, const Pass& pass) {
  const int64_t h = (r1 - r0 + 1) / 2;
  for (int64_t i = 0; i < h; ++i) {
    const bool two = r0 + h + i < r1;
    pass(r0 + i, two ? r0 + h + i : r0 + i, two);
  }
}

static inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

// The one horizontal sum of 16 lanes the kernels end their outputs with: halves, then
// quarters, then pairs, then the last two.
static inline float hsum16(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
  return _mm_cvtss_f32(b);
}

// hsum16 of four vectors at once, bit for bit: the same additions of the same operands (halves,
// then quarters, then pairs, then the last two), four vectors to a register. Lane k holds
// hsum16(vk).
static inline __m128 hsum16x4(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  // Halves: lanes 0-7 of a01 are v0's lo + hi, lanes 8-15 v1's (a23 the same for v2, v3).
  const __m512 a01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xEE));
  const __m512 a23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xEE));
  // Quarters: 128-bit lane k is vk's four quarter sums.
  const __m512 b =
      _mm512_add_ps(_mm512_shuffle_f32x4(a01, a23, 0x88), _mm512_shuffle_f32x4(a01, a23, 0xDD));
  // Pairs (b0 + b2, b1 + b3), then the last two, in lane 0 of each 128-bit lane.
  const __m512 c = _mm512_add_ps(b, _mm512_shuffle_ps(b, b, 0xEE));
  const __m512 d = _mm512_add_ps(c, _mm512_shuffle_ps(c, c, 0x55));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), d));
}

// Lanes [0, n) of 16 or 32 (n may be <= 0 or beyond the width).
static inline __mmask16 lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
static inline __mmask32 lanes32(int64_t n) {
  return n >= 32 ? __mmask32(0xFFFFFFFFu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

// UE8M0 scales [0, n) of 16 (n <= 16) as floats, as kernels::e8m0_to_float gives them:
// 2^(b - 127), 0xFF NaN. REQUIRES: out holds 16 floats.
static inline void e8m0x16(const uint8_t* p, int64_t n, float out[16]) {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes16(n), p));
  __m512i bits = _mm512_slli_epi32(b, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                               _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xFF)),
                               _mm512_set1_epi32(0x7FC00000));
  _mm512_storeu_ps(out, _mm512_castsi512_ps(bits));
}

// e^x for x <= 88 (Cephes' expf: x = k ln2 + r, a degree-6 polynomial in r, times 2^k).
static inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, k);
}

}  // namespace fathom::kernels::cpu::avx512_common
