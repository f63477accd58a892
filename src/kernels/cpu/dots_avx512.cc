// kernels::cpu::dots_f64_lanes on AVX-512 F (see kernels/dot.h for the contract): the eight
// lanes of dot_f64_lanes are one zmm register, so each step is one VFMADD231PD per row.
#include "kernels/cpu/dots_avx512.h"

#include <immintrin.h>

namespace fathom::kernels::cpu::avx512 {
namespace {

constexpr int64_t kChunk = 256;    // columns held in double for the rows of a group
constexpr int64_t kOutBlock = 25;  // sums accumulated at once (the mHC mixes' 24 + 1)

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Rows [0, R) of x. For each block of sums, the columns run a chunk at a time: the chunk of
// every row converted to double once (L1), then each sum's weights over it, its R
// accumulators in registers. Lane l of a sum adds the products of columns i = l (mod 8) in
// ascending order, as dot_f64_lanes does.
template <int R>
void rows_group(const float* x, int64_t n, const float* w, int64_t outs, double* d) {
  const int64_t full = n / 8 * 8, stride = outs + 1;
  alignas(64) double xd[R][kChunk];
  __m512d acc[kOutBlock][R];
  for (int64_t o0 = 0; o0 <= outs; o0 += kOutBlock) {
    const int64_t o1 = min64(outs + 1, o0 + kOutBlock);
    for (int64_t o = 0; o < o1 - o0; ++o)
      for (int r = 0; r < R; ++r) acc[o][r] = _mm512_setzero_pd();
    for (int64_t i0 = 0; i0 < full; i0 += kChunk) {
      const int64_t c = min64(kChunk, full - i0);
      for (int r = 0; r < R; ++r)
        for (int64_t i = 0; i < c; i += 8)
          _mm512_store_pd(&xd[r][i], _mm512_cvtps_pd(_mm256_loadu_ps(x + r * n + i0 + i)));
      for (int64_t o = o0; o < o1; ++o) {
        __m512d a[R];
        for (int r = 0; r < R; ++r) a[r] = acc[o - o0][r];
        if (o < outs) {
          const float* wo = w + o * n + i0;
          for (int64_t i = 0; i < c; i += 8) {
            const __m512d wv = _mm512_cvtps_pd(_mm256_loadu_ps(wo + i));
            for (int r = 0; r < R; ++r) a[r] = _mm512_fmadd_pd(wv, _mm512_load_pd(&xd[r][i]), a[r]);
          }
        } else {
          for (int64_t i = 0; i < c; i += 8)
            for (int r = 0; r < R; ++r) {
              const __m512d v = _mm512_load_pd(&xd[r][i]);
              a[r] = _mm512_fmadd_pd(v, v, a[r]);
            }
        }
        for (int r = 0; r < R; ++r) acc[o - o0][r] = a[r];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int64_t o = o0; o < o1; ++o) {
        alignas(64) double l[8];
        _mm512_store_pd(l, acc[o - o0][r]);
        const float* xr = x + r * n;
        for (int64_t i = full; i < n; ++i)
          l[0] += (o < outs ? double(w[o * n + i]) : double(xr[i])) * double(xr[i]);
        d[r * stride + o] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
      }
  }
}

}  // namespace

void dots_f64_lanes(const float* x, int64_t rows, int64_t n, const float* w, int64_t outs,
                    double* d) {
  const int64_t stride = outs + 1;
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) rows_group<8>(x + r * n, n, w, outs, d + r * stride);
  for (; r + 4 <= rows; r += 4) rows_group<4>(x + r * n, n, w, outs, d + r * stride);
  for (; r < rows; ++r) rows_group<1>(x + r * n, n, w, outs, d + r * stride);
}

}  // namespace fathom::kernels::cpu::avx512
