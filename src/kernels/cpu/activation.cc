// The experts' SwiGLU activation (kernels/activation.h): the reference with libm's expf, and
// eight lanes at a time with Cephes' expf polynomial. Compiled for the baseline (AVX2, FMA).
#include "kernels/activation.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/norm.h"

namespace fathom::kernels {

void ref::swiglu_bf16(const float* g, const float* u, int64_t n, float limit, float weight,
                      float* h) {
  for (int64_t i = 0; i < n; ++i) {
    const float up = std::clamp(round_to_bf16(u[i]), -limit, limit);
    const float gate = std::min(round_to_bf16(g[i]), limit);
    h[i] = round_to_bf16(gate / (1.0f + std::exp(-gate)) * up * weight);
  }
}

namespace {

// v rounded to bf16 (ties to even; NaN not expected), as fp32.
inline __m256 round_bf16(__m256 v) {
  const __m256i b = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb);
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int(0xFFFF0000u))));
}

// e^x (Cephes' expf: x = k ln2 + r, a degree-6 polynomial in r, times 2^k), x clamped to
// [-87.3, 88.7] so that 2^k stays a normal float.
inline __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

}  // namespace

void cpu::swiglu_bf16(const float* g, const float* u, int64_t n, float limit, float weight,
                      float* h) {
  const __m256 lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit),
               one = _mm256_set1_ps(1.0f), w = _mm256_set1_ps(weight);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 up = _mm256_min_ps(_mm256_max_ps(round_bf16(_mm256_loadu_ps(u + i)), nlim), lim);
    const __m256 gate = _mm256_min_ps(round_bf16(_mm256_loadu_ps(g + i)), lim);
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), gate));
    const __m256 silu = _mm256_div_ps(gate, _mm256_add_ps(one, e));
    _mm256_storeu_ps(h + i, round_bf16(_mm256_mul_ps(_mm256_mul_ps(silu, up), w)));
  }
  if (i < n) ref::swiglu_bf16(g + i, u + i, n - i, limit, weight, h + i);
}

}  // namespace fathom::kernels
