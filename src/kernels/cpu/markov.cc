// kernels::cpu::markov_bias: sixteen vocabulary rows at a time, four AVX2 accumulators of
// four doubles (independent chains, so the adds' latency overlaps), each row's sum in the
// order of r as the reference's. kernels::cpu::markov_argmax: the draft id from bounds and a
// few exact rows (kernels/markov.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

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

namespace fathom::kernels::cpu {
namespace {

// One row's biased logit exactly as markov_bias rounds it: the reference's row (the products
// are exact in double, so it and the kernel's fused multiply-adds give the same sum).
inline float exact_value(const float* h, int64_t R, const float* embed, float logit) {
  ref::markov_bias(h, 1, R, embed, &logit);
  return logit;
}

}  // namespace

int32_t markov_argmax(const float* head, const double* norms, int64_t V, int64_t R,
                      const float* embed, const float* logits, int64_t* exact_rows) {
  double sq = 0;
  for (int64_t r = 0; r < R; ++r) sq += double(embed[r]) * double(embed[r]);
  const double s = std::sqrt(sq) * (1.0 + 1e-9);
  // f(v) = fl(l + fl(acc)) with |acc| <= norms[v]·s up to 1e-14 relative: the bound below
  // adds 2^-20 of |l| and of the bias, far more than the two float roundings (2^-24 each).
  constexpr double kWiden = 0x1p-20;
  auto bound = [&](int64_t v) {
    const double l = double(logits[v]), b = norms[v] * s;
    return l + b * (1.0 + kWiden) + kWiden * std::fabs(l) + 1e-37;
  };
  bool finite = std::isfinite(s);
  int64_t top_logit = 0, top_bound = 0;
  double best_logit = -INFINITY, best_bound = -INFINITY;
  for (int64_t v = 0; v < V; ++v) {
    const double l = double(logits[v]), u = bound(v);
    finite = finite && std::isfinite(l) && std::isfinite(u);
    if (l > best_logit) best_logit = l, top_logit = v;
    if (u > best_bound) best_bound = u, top_bound = v;
  }
  if (!finite) {  // every row, compared as ref::markov_argmax compares them
    if (exact_rows != nullptr) *exact_rows += V;
    int32_t best = 0;
    float best_value = exact_value(head, R, embed, logits[0]);
    for (int64_t v = 1; v < V; ++v) {
      const float f = exact_value(head + v * R, R, embed, logits[v]);
      if (f > best_value) best_value = f, best = int32_t(v);
    }
    return best;
  }
  const float a = exact_value(head + top_logit * R, R, embed, logits[top_logit]);
  const float b = exact_value(head + top_bound * R, R, embed, logits[top_bound]);
  const double threshold = double(std::max(a, b));
  int32_t best = -1;
  float best_value = 0;
  int64_t exact = 0;
  for (int64_t v = 0; v < V; ++v) {
    if (bound(v) < threshold) continue;
    ++exact;
    const float f = exact_value(head + v * R, R, embed, logits[v]);
    if (best < 0 || f > best_value) best_value = f, best = int32_t(v);
  }
  if (exact_rows != nullptr) *exact_rows += exact + 2;
  return best;
}

}  // namespace fathom::kernels::cpu
