#include <cmath>
#include <cstring>

#include "kernels/norm.h"

namespace fathom::kernels {

float round_double_to_bf16(double v) { return round_to_bf16(float(v)); }

namespace ref {

void rmsnorm_bf16(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                  float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) {
      float sq = xr[i] * xr[i];  // fp32, one rounding
      sum += double(sq);
    }
    float var = float(sum / double(dim));
    float ve = var + eps;
    float inv = float(1.0 / std::sqrt(double(ve)));
    for (int64_t i = 0; i < dim; ++i) {
      float n = xr[i] * inv;
      y[r * dim + i] = round_to_bf16(weight[i] * n);
    }
  }
}

void linear_f32(const float* x, const float* w, int64_t rows, int64_t k, int64_t m, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += double(x[r * k + i]) * double(w[j * k + i]);
      y[r * m + j] = float(acc);
    }
  }
}

}  // namespace ref
}  // namespace fathom::kernels
