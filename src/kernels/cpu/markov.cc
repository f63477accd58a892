// kernels::cpu::markov_bias: sixteen vocabulary rows at a time, four AVX2 accumulators of
// four doubles (independent chains, so the adds' latency overlaps), each row's sum in the
// order of r as the reference's.
#include <immintrin.h>

#include "kernels/markov.h"

namespace fathom::kernels::cpu {
namespace {

// acc[j] (rows v..v+3 of block j) += head[v + i, r..r+3] · embed[r..r+3], in r order.
inline void step4(const float* const rows[4], int64_t r, const __m256d e[4], __m256d* acc) {
  __m128 a0 = _mm_loadu_ps(rows[0] + r), a1 = _mm_loadu_ps(rows[1] + r),
         a2 = _mm_loadu_ps(rows[2] + r), a3 = _mm_loadu_ps(rows[3] + r);
  _MM_TRANSPOSE4_PS(a0, a1, a2, a3);  // a_k = column r + k of the four rows
  *acc = _mm256_fmadd_pd(_mm256_cvtps_pd(a0), e[0], *acc);
  *acc = _mm256_fmadd_pd(_mm256_cvtps_pd(a1), e[1], *acc);
  *acc = _mm256_fmadd_pd(_mm256_cvtps_pd(a2), e[2], *acc);
  *acc = _mm256_fmadd_pd(_mm256_cvtps_pd(a3), e[3], *acc);
}

}  // namespace

void markov_bias(const float* head, int64_t V, int64_t R, const float* embed, float* logits) {
  constexpr int64_t kRows = 16;
  const int64_t r4 = R / 4 * 4;
  int64_t v = 0;
  for (; v + kRows <= V; v += kRows) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                      _mm256_setzero_pd()};
    const float* rows[4][4];
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) rows[j][i] = head + (v + 4 * j + i) * R;
    for (int64_t r = 0; r < r4; r += 4) {
      const __m256d e[4] = {_mm256_set1_pd(double(embed[r])), _mm256_set1_pd(double(embed[r + 1])),
                            _mm256_set1_pd(double(embed[r + 2])),
                            _mm256_set1_pd(double(embed[r + 3]))};
      for (int j = 0; j < 4; ++j) step4(rows[j], r, e, &acc[j]);
    }
    for (int64_t r = r4; r < R; ++r) {
      const __m256d e = _mm256_set1_pd(double(embed[r]));
      for (int j = 0; j < 4; ++j) {
        const __m256d col = _mm256_set_pd(double(rows[j][3][r]), double(rows[j][2][r]),
                                          double(rows[j][1][r]), double(rows[j][0][r]));
        acc[j] = _mm256_fmadd_pd(col, e, acc[j]);
      }
    }
    for (int j = 0; j < 4; ++j) {
      float* out = logits + v + 4 * j;
      _mm_storeu_ps(out, _mm_add_ps(_mm_loadu_ps(out), _mm256_cvtpd_ps(acc[j])));
    }
  }
  if (v < V) ref::markov_bias(head + v * R, V - v, R, embed, logits + v);
}

}  // namespace fathom::kernels::cpu
