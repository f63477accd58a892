// kernels::cpu::dots_f64_lanes (see kernels/dot.h): the AVX2 baseline here (eight-lane double
// arrays the compiler keeps in two ymm registers), the AVX-512 kernel in dots_avx512.cc.
#include <algorithm>

#include "kernels/cpu/dots_avx512.h"
#include "kernels/cpu_features.h"
#include "kernels/dot.h"

namespace fathom::kernels::cpu {
namespace {

constexpr int64_t kChunk = 256;    // columns held in double for the rows of a group
constexpr int64_t kOutBlock = 25;  // sums accumulated at once (the mHC mixes' 24 + 1)

// As avx512::rows_group: per block of sums, the columns a chunk at a time, converted to
// double once per row; lane l adds the products of columns i = l (mod 8) in ascending order.
template <int R>
void rows_group(const float* x, int64_t n, const float* w, int64_t outs, double* d) {
  const int64_t full = n / 8 * 8, stride = outs + 1;
  alignas(64) double xd[R][kChunk];
  alignas(64) double acc[kOutBlock][R][8];
  for (int64_t o0 = 0; o0 <= outs; o0 += kOutBlock) {
    const int64_t o1 = std::min(outs + 1, o0 + kOutBlock);
    std::fill(&acc[0][0][0], &acc[0][0][0] + kOutBlock * R * 8, 0.0);
    for (int64_t i0 = 0; i0 < full; i0 += kChunk) {
      const int64_t c = std::min(kChunk, full - i0);
      for (int r = 0; r < R; ++r)
        for (int64_t i = 0; i < c; ++i) xd[r][i] = double(x[r * n + i0 + i]);
      for (int64_t o = o0; o < o1; ++o) {
        double a[R][8];
        std::copy_n(&acc[o - o0][0][0], R * 8, &a[0][0]);
        if (o < outs) {
          const float* wo = w + o * n + i0;
          for (int64_t i = 0; i < c; i += 8)
            for (int r = 0; r < R; ++r)
              for (int l = 0; l < 8; ++l)
                a[r][l] = __builtin_fma(double(wo[i + l]), xd[r][i + l], a[r][l]);
        } else {
          for (int64_t i = 0; i < c; i += 8)
            for (int r = 0; r < R; ++r)
              for (int l = 0; l < 8; ++l)
                a[r][l] = __builtin_fma(xd[r][i + l], xd[r][i + l], a[r][l]);
        }
        std::copy_n(&a[0][0], R * 8, &acc[o - o0][0][0]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int64_t o = o0; o < o1; ++o) {
        double* l = acc[o - o0][r];
        const float* xr = x + r * n;
        for (int64_t i = full; i < n; ++i)
          l[0] += (o < outs ? double(w[o * n + i]) : double(xr[i])) * double(xr[i]);
        d[r * stride + o] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
      }
  }
}

void dots_avx2(const float* x, int64_t rows, int64_t n, const float* w, int64_t outs, double* d) {
  const int64_t stride = outs + 1;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) rows_group<4>(x + r * n, n, w, outs, d + r * stride);
  for (; r < rows; ++r) rows_group<1>(x + r * n, n, w, outs, d + r * stride);
}

}  // namespace

void dots_f64_lanes(const float* x, int64_t rows, int64_t n, const float* w, int64_t outs,
                    double* d) {
  dots_f64_lanes(cpu_path(), x, rows, n, w, outs, d);
}

void dots_f64_lanes(CpuPath path, const float* x, int64_t rows, int64_t n, const float* w,
                    int64_t outs, double* d) {
  if (path == CpuPath::kAvx2) return dots_avx2(x, rows, n, w, outs, d);
  avx512::dots_f64_lanes(x, rows, n, w, outs, d);
}

}  // namespace fathom::kernels::cpu
