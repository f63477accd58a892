// AVX2/FMA/F16C kernels (the x86-64-v3 baseline path; dispatch.cc picks the path). Decoding happens
// in registers: FP4 codes through a pshufb table (values doubled to integers), FP8 E4M3 by
// re-biasing to FP16 and F16C, BF16 by a shift. UE8M0 scales are powers of two, so folding them
// into the decoded weights is exact. batch == 1 streams each weight once (the decode GEMV); larger
// batches decode a tile of four rows into a thread-local buffer and reuse it for every activation
// row, computing each row with exactly the GEMV's arithmetic (batch-invariant: a row's result never
// depends on the batch it is in).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/paths.h"
#include "kernels/gemv.h"
#include "kernels/quant.h"

namespace fathom::kernels::cpu::avx2 {
namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

// 32 FP4 codes (16 bytes) -> 32 int8 holding 2x the E2M1 value, in element order.
inline __m256i fp4_codes_x2(const uint8_t* p) {
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
  __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
  __m128i v0 = _mm_shuffle_epi8(lut, _mm_unpacklo_epi8(lo, hi));  // elements 0..15
  __m128i v1 = _mm_shuffle_epi8(lut, _mm_unpackhi_epi8(lo, hi));  // elements 16..31
  return _mm256_set_m128i(v1, v0);
}

// 16 E4M3 bytes -> 16 floats (times 2^-8: the caller folds 256 into the scale). The byte is
// sign-extended to 16 bits and shifted into FP16 position; the mask keeps the sign (bit
// 15) and the exponent/mantissa (bits 7..13) and clears the sign copy in bit 14.
inline void e4m3x16(const uint8_t* p, __m256* lo, __m256* hi) {
  __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  v = _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(short(0xBF80)));
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
}

inline __m256 bf16x8(const uint16_t* p) {
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// Decodes row m of each format into 32-float blocks, already scaled.
inline void decode_fp4_block(const Fp4Matrix& w, int64_t m, int64_t kb, float* out) {
  const float s = e8m0_to_float(w.scale[m * (w.cols / 32) + kb]) * 0.5f;
  __m256i c = fp4_codes_x2(w.weight + m * (w.cols / 2) + kb * 16);
  __m128i c0 = _mm256_castsi256_si128(c), c1 = _mm256_extracti128_si256(c, 1);
  __m256 vs = _mm256_set1_ps(s);
  _mm256_storeu_ps(out + 0, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c0))));
  _mm256_storeu_ps(
      out + 8, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c0, 8)))));
  _mm256_storeu_ps(out + 16, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c1))));
  _mm256_storeu_ps(
      out + 24, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c1, 8)))));
}

// One 32-weight FP4 block of a row times the block's x in even/odd order (xp[0..1] = the even
// elements, xp[2..3] = the odd ones): the low nibbles are the even elements and the high
// nibbles the odd ones, so no interleaving shuffle is needed.
inline void fp4_block_dot_eo(const uint8_t* codes, const __m256 xp[4], __m256* t, __m256* u) {
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m128i ev = _mm_shuffle_epi8(lut, _mm_and_si128(b, _mm_set1_epi8(0x0F)));
  const __m128i od =
      _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F)));
  *t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(ev)), xp[0]);
  *t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(ev, 8))), xp[1], *t);
  *u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(od)), xp[2]);
  *u = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(od, 8))), xp[3], *u);
}

// Rows [r0, r1) of y = W x for one activation row (the streaming GEMV). x is first reordered
// to even/odd per block; four rows at a time share its loads, and the next four rows are
// prefetched while these are decoded.
void gemv_fp4_rows(const Fp4Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t kbs = w.cols / 32, stride = w.cols / 2;
  thread_local std::vector<float> xp;
  xp.resize(size_t(w.cols));
  for (int64_t kb = 0; kb < kbs; ++kb)
    for (int i = 0; i < 16; ++i) {
      xp[size_t(kb * 32 + i)] = x[kb * 32 + 2 * i];
      xp[size_t(kb * 32 + 16 + i)] = x[kb * 32 + 2 * i + 1];
    }
  auto block_x = [&](int64_t kb, __m256 v[4]) {
    const float* p = xp.data() + kb * 32;
    v[0] = _mm256_loadu_ps(p);
    v[1] = _mm256_loadu_ps(p + 8);
    v[2] = _mm256_loadu_ps(p + 16);
    v[3] = _mm256_loadu_ps(p + 24);
  };
  int64_t m = r0;
  for (; m + 4 <= r1; m += 4) {
    const uint8_t* wr = w.weight + m * stride;
    const uint8_t* sr = w.scale + m * kbs;
    const uint8_t* next = wr + 4 * stride;
    const bool prefetch = m + 8 <= r1;
    __m256 acc[4][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < kbs; ++kb) {
      if (prefetch && (kb & 3) == 0)
        for (int r = 0; r < 4; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(next + r * stride + kb * 16), _MM_HINT_T0);
      __m256 xv[4];
      block_x(kb, xv);
      for (int r = 0; r < 4; ++r) {
        __m256 t, u;
        fp4_block_dot_eo(wr + r * stride + kb * 16, xv, &t, &u);
        const __m256 sc = _mm256_set1_ps(e8m0_to_float(sr[r * kbs + kb]) * 0.5f);
        acc[r][0] = _mm256_fmadd_ps(t, sc, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(u, sc, acc[r][1]);
      }
    }
    for (int r = 0; r < 4; ++r) y[m + r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
  }
  for (; m < r1; ++m) {
    const uint8_t* wa = w.weight + m * stride;
    const uint8_t* sa = w.scale + m * kbs;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < kbs; ++kb) {
      __m256 xv[4];
      block_x(kb, xv);
      __m256 t, u;
      fp4_block_dot_eo(wa + kb * 16, xv, &t, &u);
      const __m256 sc = _mm256_set1_ps(e8m0_to_float(sa[kb]) * 0.5f);
      a0 = _mm256_fmadd_ps(t, sc, a0);
      a1 = _mm256_fmadd_ps(u, sc, a1);
    }
    y[m] = hsum(_mm256_add_ps(a0, a1));
  }
}

void gemv_fp8_rows(const Fp8Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  // A scale covers 32 rows x 32 columns, so each 32-row band first folds its scales (and
  // the 2^8 of the FP16 re-bias) into a scaled copy of x; the rows then need one FMA per
  // 8 weights. Two rows share each load of the scaled x; weights are prefetched 4 KB
  // ahead, far enough to cover DRAM latency (1 KB was not: decode ran 20% slower).
  const int64_t kbs = (w.cols + 31) / 32;
  const int64_t full16 = w.cols / 16;
  thread_local std::vector<float> xs;
  xs.resize(size_t(w.cols));
  int64_t band = -1;
  for (int64_t m = r0; m < r1;) {
    if (m / 32 != band) {
      band = m / 32;
      const uint8_t* sr = w.scale + band * kbs;
      for (int64_t k = 0; k < w.cols; ++k)
        xs[size_t(k)] = x[k] * (e8m0_to_float(sr[k / 32]) * 256.0f);
    }
    const bool pair = m + 1 < r1 && (m + 1) / 32 == band;
    const uint8_t* wa = w.weight + m * w.cols;
    const uint8_t* wb = pair ? wa + w.cols : wa;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps(),
           b1 = _mm256_setzero_ps();
    for (int64_t c = 0; c < full16; ++c) {
      if ((c & 3) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(wa + c * 16 + 4096), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wb + c * 16 + 4096), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wa + c * 16 + 16384), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(wb + c * 16 + 16384), _MM_HINT_T1);
      }
      __m256 x0 = _mm256_loadu_ps(xs.data() + c * 16), x1 = _mm256_loadu_ps(xs.data() + c * 16 + 8);
      __m256 lo, hi;
      e4m3x16(wa + c * 16, &lo, &hi);
      a0 = _mm256_fmadd_ps(lo, x0, a0);
      a1 = _mm256_fmadd_ps(hi, x1, a1);
      e4m3x16(wb + c * 16, &lo, &hi);
      b0 = _mm256_fmadd_ps(lo, x0, b0);
      b1 = _mm256_fmadd_ps(hi, x1, b1);
    }
    float ta = 0, tb = 0;
    // An explicit FMA: the batched matmul_fp8_rows repeats this arithmetic exactly.
    for (int64_t k = full16 * 16; k < w.cols; ++k) {
      ta = std::fma(kernels::e4m3_to_float(wa[k]) / 256.0f, xs[size_t(k)], ta);
      tb = std::fma(kernels::e4m3_to_float(wb[k]) / 256.0f, xs[size_t(k)], tb);
    }
    y[m] = hsum(_mm256_add_ps(a0, a1)) + ta;
    if (pair) y[m + 1] = hsum(_mm256_add_ps(b0, b1)) + tb;
    m += pair ? 2 : 1;
  }
}

void gemv_bf16_rows(const Bf16Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t full = w.cols / 16;
  for (int64_t m = r0; m < r1; ++m) {
    const uint16_t* wr = w.weight + m * w.cols;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t k = 0; k < full * 16; k += 16) {
      if ((k & 31) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(wr + k + 4096), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wr + k + 16384), _MM_HINT_T1);
      }
      acc0 = _mm256_fmadd_ps(bf16x8(wr + k), _mm256_loadu_ps(x + k), acc0);
      acc1 = _mm256_fmadd_ps(bf16x8(wr + k + 8), _mm256_loadu_ps(x + k + 8), acc1);
    }
    float tail = 0;
    // An explicit FMA: the batched matmul_bf16 repeats this arithmetic exactly.
    for (int64_t k = full * 16; k < w.cols; ++k) tail = std::fma(bf16_to_float(wr[k]), x[k], tail);
    y[m] = hsum(_mm256_add_ps(acc0, acc1)) + tail;
  }
}

// Batched FP8, batch-invariant: every output is computed as gemv_fp8_rows computes it — the
// same two accumulators over alternate 8-lane halves of each 16 columns, the same tail — so a
// row's result does not depend on how many rows share the call (prefill chunks, batched
// decode and the decode GEMV agree bit for bit). The GEMV multiplies w * 2^-8 by x * 256 s
// (s the block's power-of-two scale); here the tile holds w * 2^-8 * 256 s and x is used as
// is: each FMA gets the same exact product, so the sums round identically (the only
// exception is an x so small that x * 256 s is subnormal, below 2^-126, where the GEMV's copy
// loses bits). Four weight rows are decoded once per tile and reused for every activation row.
void matmul_fp8_rows(const Fp8Matrix& w, const float* x, int64_t batch, float* y, int64_t r0,
                     int64_t r1) {
  const int64_t K = w.cols, kbs = (K + 31) / 32, full16 = K / 16, kpad = (K + 15) / 16 * 16;
  thread_local std::vector<float> tile;
  tile.resize(size_t(4 * kpad));
  for (int64_t m0 = r0; m0 < r1; m0 += 4) {
    const int64_t nr = std::min<int64_t>(4, r1 - m0);
    for (int64_t r = 0; r < nr; ++r) {
      const uint8_t* wr = w.weight + (m0 + r) * K;
      const uint8_t* sr = w.scale + ((m0 + r) / 32) * kbs;
      float* t = tile.data() + r * kpad;
      for (int64_t c = 0; c < full16; ++c) {
        __m256 lo, hi;
        e4m3x16(wr + c * 16, &lo, &hi);
        const __m256 sv = _mm256_set1_ps(e8m0_to_float(sr[c / 2]) * 256.0f);
        _mm256_storeu_ps(t + c * 16, _mm256_mul_ps(lo, sv));
        _mm256_storeu_ps(t + c * 16 + 8, _mm256_mul_ps(hi, sv));
      }
      for (int64_t k = full16 * 16; k < K; ++k)
        t[k] = kernels::e4m3_to_float(wr[k]) * e8m0_to_float(sr[k / 32]);
    }
    const float* t0 = tile.data();
    const float* t1 = nr > 1 ? t0 + kpad : t0;
    const float* t2 = nr > 2 ? t0 + 2 * kpad : t0;
    const float* t3 = nr > 3 ? t0 + 3 * kpad : t0;
    for (int64_t n = 0; n < batch; ++n) {
      const float* xn = x + n * K;
      __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0,
             b3 = a0;
      for (int64_t k = 0; k < full16 * 16; k += 16) {
        const __m256 x0 = _mm256_loadu_ps(xn + k), x1 = _mm256_loadu_ps(xn + k + 8);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(t0 + k), x0, a0);
        b0 = _mm256_fmadd_ps(_mm256_loadu_ps(t0 + k + 8), x1, b0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(t1 + k), x0, a1);
        b1 = _mm256_fmadd_ps(_mm256_loadu_ps(t1 + k + 8), x1, b1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(t2 + k), x0, a2);
        b2 = _mm256_fmadd_ps(_mm256_loadu_ps(t2 + k + 8), x1, b2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(t3 + k), x0, a3);
        b3 = _mm256_fmadd_ps(_mm256_loadu_ps(t3 + k + 8), x1, b3);
      }
      const __m256 sums[4] = {_mm256_add_ps(a0, b0), _mm256_add_ps(a1, b1), _mm256_add_ps(a2, b2),
                              _mm256_add_ps(a3, b3)};
      const float* rows[4] = {t0, t1, t2, t3};
      for (int64_t r = 0; r < nr; ++r) {
        float tail = 0;
        for (int64_t k = full16 * 16; k < K; ++k) tail = std::fma(rows[r][k], xn[k], tail);
        y[n * w.rows + m0 + r] = hsum(sums[r]) + tail;
      }
    }
  }
}

// Batched FP4, batch-invariant like matmul_fp8_rows: each 32-weight block is multiplied as
// fp4_block_dot_eo does (codes as 2x-valued floats in even/odd order against x in even/odd
// order, the block's scale applied to the two partial sums), so every row equals the GEMV's.
void matmul_fp4_rows(const Fp4Matrix& w, const float* x, int64_t batch, float* y, int64_t r0,
                     int64_t r1) {
  const int64_t K = w.cols, kbs = K / 32, stride = K / 2;
  thread_local std::vector<float> tile, scales, xp;
  tile.resize(size_t(4 * K));
  scales.resize(size_t(4 * kbs));
  xp.resize(size_t(batch * K));
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t kb = 0; kb < kbs; ++kb)
      for (int i = 0; i < 16; ++i) {
        xp[size_t(n * K + kb * 32 + i)] = x[n * K + kb * 32 + 2 * i];
        xp[size_t(n * K + kb * 32 + 16 + i)] = x[n * K + kb * 32 + 2 * i + 1];
      }
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  for (int64_t m0 = r0; m0 < r1; m0 += 4) {
    const int64_t nr = std::min<int64_t>(4, r1 - m0);
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t m = m0 + std::min(r, nr - 1);  // pad rows repeat the last (unused)
      for (int64_t kb = 0; kb < kbs; ++kb) {
        const __m128i b =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.weight + m * stride + kb * 16));
        const __m128i ev = _mm_shuffle_epi8(lut, _mm_and_si128(b, _mm_set1_epi8(0x0F)));
        const __m128i od =
            _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F)));
        float* t = tile.data() + r * K + kb * 32;
        _mm256_storeu_ps(t, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(ev)));
        _mm256_storeu_ps(t + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(ev, 8))));
        _mm256_storeu_ps(t + 16, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(od)));
        _mm256_storeu_ps(t + 24, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(od, 8))));
        scales[size_t(r * kbs + kb)] = e8m0_to_float(w.scale[m * kbs + kb]) * 0.5f;
      }
    }
    for (int64_t n = 0; n < batch; ++n) {
      const float* xn = xp.data() + n * K;
      __m256 acc[4][2];
      for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
      for (int64_t kb = 0; kb < kbs; ++kb) {
        const float* p = xn + kb * 32;
        const __m256 x0 = _mm256_loadu_ps(p), x1 = _mm256_loadu_ps(p + 8),
                     x2 = _mm256_loadu_ps(p + 16), x3 = _mm256_loadu_ps(p + 24);
        for (int64_t r = 0; r < 4; ++r) {
          const float* t = tile.data() + r * K + kb * 32;
          __m256 tv = _mm256_mul_ps(_mm256_loadu_ps(t), x0);
          tv = _mm256_fmadd_ps(_mm256_loadu_ps(t + 8), x1, tv);
          __m256 uv = _mm256_mul_ps(_mm256_loadu_ps(t + 16), x2);
          uv = _mm256_fmadd_ps(_mm256_loadu_ps(t + 24), x3, uv);
          const __m256 sc = _mm256_set1_ps(scales[size_t(r * kbs + kb)]);
          acc[r][0] = _mm256_fmadd_ps(tv, sc, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(uv, sc, acc[r][1]);
        }
      }
      for (int64_t r = 0; r < nr; ++r)
        y[n * w.rows + m0 + r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
    }
  }
}

}  // namespace

void matmul_fp4(const Fp4Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool) {
  if (batch == 1) {
    over_rows(w.rows, pool, [&](int64_t a, int64_t b) { gemv_fp4_rows(w, x, y, a, b); });
    return;
  }
  over_rows(w.rows, pool, [&](int64_t a, int64_t b) { matmul_fp4_rows(w, x, batch, y, a, b); });
}

void matmul_fp8(const Fp8Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool) {
  if (batch == 1) {
    over_rows(w.rows, pool, [&](int64_t a, int64_t b) { gemv_fp8_rows(w, x, y, a, b); });
    return;
  }
  over_rows(w.rows, pool, [&](int64_t a, int64_t b) { matmul_fp8_rows(w, x, batch, y, a, b); });
}

void matmul_bf16(const Bf16Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool) {
  if (batch == 1) {
    over_rows(w.rows, pool, [&](int64_t a, int64_t b) { gemv_bf16_rows(w, x, y, a, b); });
    return;
  }
  // Batch-invariant: every output is computed exactly as gemv_bf16_rows computes it (two
  // accumulators over alternate 8-lane halves of each 16 columns, then the scalar tail), so a
  // row's result does not depend on how many rows share the call (the batched head gives a
  // sequence the logits it would get alone). Four weight rows are decoded once per tile.
  const int64_t full = w.cols / 16, kpad = (w.cols + 15) / 16 * 16;
  over_rows(w.rows, pool, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> tile;
    tile.assign(size_t(4 * kpad), 0.0f);
    for (int64_t m0 = r0; m0 < r1; m0 += 4) {
      const int64_t nr = std::min<int64_t>(4, r1 - m0);
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t k = 0; k < w.cols; ++k)
          tile[size_t(r * kpad + k)] = bf16_to_float(w.weight[(m0 + r) * w.cols + k]);
      for (int64_t n = 0; n < batch; ++n) {
        const float* xn = x + n * w.cols;
        __m256 acc[4][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
        for (int64_t k = 0; k < full * 16; k += 16) {
          const __m256 x0 = _mm256_loadu_ps(xn + k), x1 = _mm256_loadu_ps(xn + k + 8);
          for (int64_t r = 0; r < 4; ++r) {
            const float* t = tile.data() + r * kpad + k;
            acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(t), x0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(t + 8), x1, acc[r][1]);
          }
        }
        for (int64_t r = 0; r < nr; ++r) {
          float tail = 0;
          for (int64_t k = full * 16; k < w.cols; ++k)
            tail = std::fma(tile[size_t(r * kpad + k)], xn[k], tail);
          y[n * w.rows + m0 + r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1])) + tail;
        }
      }
    }
  });
}

}  // namespace fathom::kernels::cpu::avx2
