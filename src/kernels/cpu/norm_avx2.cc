// RMSNorm, fp32 accumulation with AVX2.
#include <immintrin.h>

#include <cmath>

#include "kernels/norm.h"

namespace fathom::kernels::cpu {

void rmsnorm_bf16(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                  float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
      __m256 v = _mm256_loadu_ps(xr + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    float buf[8];
    _mm256_storeu_ps(buf, acc);
    float sum = 0;
    for (float b : buf) sum += b;
    for (; i < dim; ++i) sum += xr[i] * xr[i];
    float inv = 1.0f / std::sqrt(sum / float(dim) + eps);
    for (int64_t k = 0; k < dim; ++k) y[r * dim + k] = round_to_bf16(weight[k] * (xr[k] * inv));
  }
}

}  // namespace fathom::kernels::cpu
