// Dot products of fp32 vectors summed in eight independent lanes, so that the compiler
// vectorises them without reassociating one accumulator (no -ffast-math needed). The lane
// sums are combined pairwise at the end. Pure inline functions; any thread.
#pragma once

#include <cstdint>

namespace fathom::kernels {

// fp32 products and sums (the fast numerics).
inline float dot_f32_lanes(const float* a, const float* b, int64_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) lanes[0] += a[i] * b[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// Products exact in double and double sums: only the summation order differs from a
// sequential double loop.
inline double dot_f64_lanes(const float* a, const float* b, int64_t n) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += double(a[i + l]) * double(b[i + l]);
  for (; i < n; ++i) lanes[0] += double(a[i]) * double(b[i]);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

}  // namespace fathom::kernels
