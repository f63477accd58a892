// Dot products of fp32 vectors summed in eight independent lanes, so that the compiler
// vectorises them without reassociating one accumulator (no -ffast-math needed). The lane
// sums are combined pairwise at the end. Pure functions; any thread.
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

enum class CpuPath;  // kernels/cpu_features.h

namespace cpu {
// Many dot_f64_lanes() at once, bit for bit: for r < rows,
//   d[r * (outs + 1) + o]    = dot_f64_lanes(w + o * n, x + r * n, n) for o < outs,
//   d[r * (outs + 1) + outs] = dot_f64_lanes(x + r * n, x + r * n, n)  (the squares' sum).
// Each lane's sum is the same chain of fused multiply-adds (exact products) on every path; the
// fast kernels take the columns a block at a time for several rows and all sums, so that x
// and the w values of a block are read from L1 (the mHC mixes: 25 sums over 4 x hidden values
// a token). Runs on the calling thread.
void dots_f64_lanes(const float* x, int64_t rows, int64_t n, const float* w, int64_t outs,
                    double* d);
// On a named path (tests). REQUIRES: cpu_path_available(path).
void dots_f64_lanes(CpuPath path, const float* x, int64_t rows, int64_t n, const float* w,
                    int64_t outs, double* d);
}  // namespace cpu

}  // namespace fathom::kernels
