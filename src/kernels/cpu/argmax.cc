// kernels::cpu::argmax_first: the maximum over the non-NaN values in four AVX2 accumulators
// (max_ps(x, acc) keeps acc when x is NaN), then the first index equal to it (-0 == +0, as
// the scalar comparison treats them).
#include <immintrin.h>

#include <cmath>

#include "kernels/argmax.h"

namespace fathom::kernels::cpu {

int64_t argmax_first(const float* x, int64_t n) {
  if (n < 64 || std::isnan(x[0])) return ref::argmax_first(x, n);
  __m256 acc[4];
  for (int j = 0; j < 4; ++j) acc[j] = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_max_ps(_mm256_loadu_ps(x + i + 8 * j), acc[j]);
  const __m256 m2 = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m2);
  float top = lanes[0];
  for (int j = 1; j < 8; ++j) top = lanes[j] > top ? lanes[j] : top;
  for (; i < n; ++i) top = x[i] > top ? x[i] : top;
  const __m256 want = _mm256_set1_ps(top);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + k), want, _CMP_EQ_OQ));
    if (mask != 0) return k + __builtin_ctz(unsigned(mask));
  }
  for (; k < n; ++k)
    if (x[k] == top) return k;
  return 0;  // not reached: top is one of the values
}

}  // namespace fathom::kernels::cpu
