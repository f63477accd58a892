// AVX-512 (F/BW/VL) GEMVs and their batched twins for FP8, FP4 and BF16 weights. Decoding
// happens in registers as in gemv_avx2.cc, sixteen lanes wide: FP8 E4M3 re-biased to FP16
// and converted (vcvtph2ps), FP4 E2M1 looked up in a 16-entry float table already
// multiplied by the block's power-of-two scale (vpermps indexes by the low four bits, so a
// nibble needs no masking), BF16 by a shift. Scaling by a power of two is exact, so folding
// a scale into the table or into x changes no product.
//
// Compiled with -mavx512*: this file includes only gemv_avx512.h and avx512_common.h (static
// helpers) and defines nothing with linkage the baseline files could share (see
// gemv_avx512.h).
#include "kernels/cpu/gemv_avx512.h"

#include "kernels/cpu/avx512_common.h"

#include <immintrin.h>

#include <cstdint>

namespace fathom::kernels::cpu::avx512 {
namespace {

using avx512_common::e8m0x16;
using avx512_common::hsum16;
using avx512_common::hsum16x4;
using avx512_common::lanes16;
using avx512_common::lanes32;
using avx512_common::min64;
using avx512_common::prefetch;
using avx512_common::two_streams;
using avx512_common::with_count;

// y[r] for r < nr: the sum of row r's two accumulators (acc[2r] + acc[2r + 1]), then hsum16.
inline void store4_pairs(const __m512 acc[8], int64_t nr, float* y) {
  _mm_mask_storeu_ps(y, __mmask8(lanes16(nr)),
                     hsum16x4(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]),
                              _mm512_add_ps(acc[4], acc[5]), _mm512_add_ps(acc[6], acc[7])));
}

// UE8M0 as kernels::e8m0_to_float: 2^(b - 127); 0xFF is NaN.
float e8m0(uint8_t b) {
  const uint32_t bits = b == 0 ? 0x00400000u : b == 0xFF ? 0x7FC00000u : uint32_t(b) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// 32 E4M3 bytes -> 32 floats times 2^-8 (the caller folds 256 into x's scale): the byte is
// sign-extended to 16 bits and shifted into FP16 position; the mask keeps the sign (bit 15)
// and the exponent/mantissa (bits 7..13). Bytes outside `m` decode to +0.
inline void e4m3x32(const uint8_t* p, __mmask32 m, __m512* lo, __m512* hi) {
  __m512i v = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, p));
  v = _mm512_and_si512(_mm512_slli_epi16(v, 7), _mm512_set1_epi16(short(0xBF80)));
  *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(v));
  *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
}
inline void e4m3x32(const uint8_t* p, __m512* lo, __m512* hi) {
  __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  v = _mm512_and_si512(_mm512_slli_epi16(v, 7), _mm512_set1_epi16(short(0xBF80)));
  *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(v));
  *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
}

// 16 BF16 -> 16 floats; halves outside `m` decode to +0.
inline __m512 bf16x16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
inline __m512 bf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// ---- FP8: E4M3 weights, UE8M0 scale per 32x32 block --------------------------------------
//
// Row m, chunk c (columns [32c, 32c + 32), one scale block): xs = x * (s * 256) (fp32),
// acc0 += w[0..16) * 2^-8 * xs[0..16), acc1 += w[16..32) * 2^-8 * xs[16..32) (FMAs).

// x scaled by band b's scales (and 256), zero beyond K: the GEMV's and the batched form's
// common first step. xs has kpad floats.
void scale_x_fp8(const Fp8Matrix& w, const float* x, int64_t band, float* xs) {
  const int64_t K = w.cols, chunks = (K + 31) / 32;
  const uint8_t* sr = w.scale + band * chunks;
  for (int64_t c = 0; c < chunks; ++c) {
    const __m512 sv = _mm512_set1_ps(e8m0(sr[c]) * 256.0f);
    const int64_t k = c * 32;
    _mm512_storeu_ps(xs + k, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes16(K - k), x + k), sv));
    _mm512_storeu_ps(xs + k + 16,
                     _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes16(K - k - 16), x + k + 16), sv));
  }
}

// Two rows, each against its own band's scaled x (xs[r]); acc [2][2].
inline void fp8_two_rows(const uint8_t* const wr[2], const float* const xs[2], int64_t K,
                         __m512 acc[4]) {
  const int64_t full = K / 32, chunks = (K + 31) / 32;
  for (int r = 0; r < 4; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < full; ++c) {
    for (int r = 0; r < 2; ++r) {
      __m512 lo, hi;
      e4m3x32(wr[r] + c * 32, &lo, &hi);
      acc[2 * r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xs[r] + c * 32), acc[2 * r]);
      acc[2 * r + 1] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xs[r] + c * 32 + 16), acc[2 * r + 1]);
    }
  }
  if (full < chunks) {
    const __mmask32 m = lanes32(K - full * 32);
    for (int r = 0; r < 2; ++r) {
      __m512 lo, hi;
      e4m3x32(wr[r] + full * 32, m, &lo, &hi);
      acc[2 * r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xs[r] + full * 32), acc[2 * r]);
      acc[2 * r + 1] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xs[r] + full * 32 + 16), acc[2 * r + 1]);
    }
  }
}

// y[a] and, when two, y[b] from their accumulator pairs.
inline void store2_pairs(const __m512 acc[4], int64_t a, int64_t b, bool two, float* y) {
  y[a] = hsum16(_mm512_add_ps(acc[0], acc[1]));
  if (two) y[b] = hsum16(_mm512_add_ps(acc[2], acc[3]));
}

// The rows as two streams (two_streams); xs holds two scaled x (kpad floats each): one per
// stream, rescaled when its band changes.
void gemv_fp8(const Fp8Matrix& w, const float* x, float* y, int64_t r0, int64_t r1, float* xs) {
  const int64_t K = w.cols, kpad = (K + 31) / 32 * 32;
  int64_t band[2] = {-1, -1};
  float* const xr[2] = {xs, xs + kpad};
  two_streams(r0, r1, [&](int64_t a, int64_t b, bool two) {
    const int64_t rows[2] = {a, b};
    for (int r = 0; r < 2; ++r)
      if (rows[r] / 32 != band[r]) {
        band[r] = rows[r] / 32;
        scale_x_fp8(w, x, band[r], xr[r]);
      }
    const uint8_t* wr[2] = {w.weight + rows[0] * K, w.weight + rows[1] * K};
    __m512 acc[4];
    fp8_two_rows(wr, xr, K, acc);
    store2_pairs(acc, a, b, two, y);
  });
}

// ---- FP4: E2M1 pairs, UE8M0 scale per 32 columns -----------------------------------------
//
// Row m, block kb: t = table * s (exact), acc0 += t[even codes] * x[even columns],
// acc1 += t[odd codes] * x[odd columns] (FMAs; x in even/odd order, xp).

const float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// One block of one row: the 32 weights, scaled, in even/odd order.
inline void fp4_block(const uint8_t* codes, float scale, __m512 table, __m512* ev, __m512* od) {
  const __m512 t = _mm512_mul_ps(table, _mm512_set1_ps(scale));
  const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  *ev = _mm512_permutexvar_ps(c, t);
  *od = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), t);
}

void gemv_fp4(const Fp4Matrix& w, const float* xp, float* y, int64_t r0, int64_t r1) {
  const int64_t K = w.cols, kbs = K / 32, stride = K / 2;
  const __m512 table = _mm512_loadu_ps(kE2m1);
  two_streams(r0, r1, [&](int64_t a, int64_t b, bool two) {
    const int64_t rows[2] = {a, b};
    const uint8_t* wr[2];
    const uint8_t* sr[2];
    for (int r = 0; r < 2; ++r) {
      wr[r] = w.weight + rows[r] * stride;
      sr[r] = w.scale + rows[r] * kbs;
    }
    __m512 acc[4];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t kb0 = 0; kb0 < kbs; kb0 += 16) {
      const int64_t nb = min64(16, kbs - kb0);
      float sc[2][16];
      for (int r = 0; r < 2; ++r) e8m0x16(sr[r] + kb0, nb, sc[r]);
      for (int64_t j = 0; j < nb; ++j) {
        const int64_t kb = kb0 + j;
        const __m512 xe = _mm512_loadu_ps(xp + kb * 32), xo = _mm512_loadu_ps(xp + kb * 32 + 16);
        for (int r = 0; r < 2; ++r) {
          __m512 ev, od;
          fp4_block(wr[r] + kb * 16, sc[r][j], table, &ev, &od);
          acc[2 * r] = _mm512_fmadd_ps(ev, xe, acc[2 * r]);
          acc[2 * r + 1] = _mm512_fmadd_ps(od, xo, acc[2 * r + 1]);
        }
      }
    }
    store2_pairs(acc, a, b, two, y);
  });
}

// ---- BF16 ---------------------------------------------------------------------------------
//
// Row m, chunk c: acc0 += w[32c..32c+16) x[..], acc1 += w[32c+16..32c+32) x[..] (FMAs).

void gemv_bf16(const Bf16Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t K = w.cols, full = K / 32, chunks = (K + 31) / 32;
  for (int64_t m = r0; m < r1; m += 4) {
    const int64_t nr = min64(4, r1 - m);
    const uint16_t* wr[4];
    for (int r = 0; r < 4; ++r) wr[r] = w.weight + (m + (r < nr ? r : 0)) * K;
    __m512 acc[8];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t c = 0; c < full; ++c) {
      for (int r = 0; r < 4; ++r) prefetch(wr[r] + c * 32 + 2048);
      const __m512 x0 = _mm512_loadu_ps(x + c * 32), x1 = _mm512_loadu_ps(x + c * 32 + 16);
      for (int r = 0; r < 4; ++r) {
        acc[2 * r] = _mm512_fmadd_ps(bf16x16(wr[r] + c * 32), x0, acc[2 * r]);
        acc[2 * r + 1] = _mm512_fmadd_ps(bf16x16(wr[r] + c * 32 + 16), x1, acc[2 * r + 1]);
      }
    }
    if (full < chunks) {
      const int64_t k = full * 32;
      const __mmask16 m0 = lanes16(K - k), m1 = lanes16(K - k - 16);
      const __m512 x0 = _mm512_maskz_loadu_ps(m0, x + k),
                   x1 = _mm512_maskz_loadu_ps(m1, x + k + 16);
      for (int r = 0; r < 4; ++r) {
        acc[2 * r] = _mm512_fmadd_ps(bf16x16(wr[r] + k, m0), x0, acc[2 * r]);
        acc[2 * r + 1] = _mm512_fmadd_ps(bf16x16(wr[r] + k + 16, m1), x1, acc[2 * r + 1]);
      }
    }
    store4_pairs(acc, nr, y + m);
  }
}

// ---- Batches: the GEMV over up to eight activation rows at a time ---------------------------
//
// Each weight chunk is decoded once per eight activation rows, in registers, exactly as the
// GEMV decodes it, and multiplied with each row (two accumulators per row, the GEMV's chunk
// order and sum), so every row of a batch equals the GEMV's result bit for bit. Measured on
// 4096 x 14336, one thread, this beat decoding 16 rows into an L2 tile of floats and reusing
// it for every activation row (the earlier design) at every batch size tried (8, 32, 512):
// by 1.0-1.4x at 8 and 32 and 1.4-1.6x at 512.

constexpr int64_t kMultiRows = 8;

template <int NN>
void fp8_multi(const Fp8Matrix& w, const float* x, int64_t n0, float* y, int64_t r0, int64_t r1,
               float* xs) {
  const int64_t K = w.cols, chunks = (K + 31) / 32, full = K / 32, kpad = chunks * 32;
  int64_t band = -1;
  for (int64_t m = r0; m < r1; ++m) {
    if (m / 32 != band) {
      band = m / 32;
      for (int n = 0; n < NN; ++n) scale_x_fp8(w, x + (n0 + n) * K, band, xs + n * kpad);
    }
    const uint8_t* wr = w.weight + m * K;
    __m512 acc[NN][2];
    for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      if ((c & 1) == 0) prefetch(wr + c * 32 + 4096);
      __m512 lo, hi;
      if (c < full)
        e4m3x32(wr + c * 32, &lo, &hi);
      else
        e4m3x32(wr + c * 32, lanes32(K - c * 32), &lo, &hi);
      for (int n = 0; n < NN; ++n) {
        acc[n][0] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xs + n * kpad + c * 32), acc[n][0]);
        acc[n][1] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xs + n * kpad + c * 32 + 16), acc[n][1]);
      }
    }
    for (int n = 0; n < NN; ++n)
      y[(n0 + n) * w.rows + m] = hsum16(_mm512_add_ps(acc[n][0], acc[n][1]));
  }
}

template <int NN>
void fp4_multi(const Fp4Matrix& w, const float* xp, int64_t n0, float* y, int64_t r0, int64_t r1) {
  const int64_t K = w.cols, kbs = K / 32, stride = K / 2;
  const __m512 table = _mm512_loadu_ps(kE2m1);
  const float* xn = xp + n0 * K;
  for (int64_t m = r0; m < r1; ++m) {
    const uint8_t* wr = w.weight + m * stride;
    __m512 acc[NN][2];
    for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
    for (int64_t kb0 = 0; kb0 < kbs; kb0 += 16) {
      const int64_t nb = min64(16, kbs - kb0);
      float sc[16];
      e8m0x16(w.scale + m * kbs + kb0, nb, sc);
      for (int64_t j = 0; j < nb; ++j) {
        const int64_t kb = kb0 + j;
        if ((kb & 3) == 0) prefetch(wr + stride + kb * 16);
        __m512 ev, od;
        fp4_block(wr + kb * 16, sc[j], table, &ev, &od);
        for (int n = 0; n < NN; ++n) {
          acc[n][0] = _mm512_fmadd_ps(ev, _mm512_loadu_ps(xn + n * K + kb * 32), acc[n][0]);
          acc[n][1] = _mm512_fmadd_ps(od, _mm512_loadu_ps(xn + n * K + kb * 32 + 16), acc[n][1]);
        }
      }
    }
    for (int n = 0; n < NN; ++n)
      y[(n0 + n) * w.rows + m] = hsum16(_mm512_add_ps(acc[n][0], acc[n][1]));
  }
}

template <int NN>
void bf16_multi(const Bf16Matrix& w, const float* x, int64_t n0, float* y, int64_t r0, int64_t r1) {
  const int64_t K = w.cols, chunks = (K + 31) / 32, full = K / 32;
  const float* xn = x + n0 * K;
  for (int64_t m = r0; m < r1; ++m) {
    const uint16_t* wr = w.weight + m * K;
    __m512 acc[NN][2];
    for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t k = c * 32;
      prefetch(wr + k + 2048);
      const __mmask16 m0 = c < full ? __mmask16(0xFFFF) : lanes16(K - k),
                      m1 = c < full ? __mmask16(0xFFFF) : lanes16(K - k - 16);
      const __m512 lo = bf16x16(wr + k, m0), hi = bf16x16(wr + k + 16, m1);
      for (int n = 0; n < NN; ++n) {
        acc[n][0] = _mm512_fmadd_ps(lo, _mm512_maskz_loadu_ps(m0, xn + n * K + k), acc[n][0]);
        acc[n][1] = _mm512_fmadd_ps(hi, _mm512_maskz_loadu_ps(m1, xn + n * K + k + 16), acc[n][1]);
      }
    }
    for (int n = 0; n < NN; ++n)
      y[(n0 + n) * w.rows + m] = hsum16(_mm512_add_ps(acc[n][0], acc[n][1]));
  }
}

// Calls fn(integral NN) for activation rows [0, batch) in groups of up to eight.
template <class Fn>
void in_groups_of_eight(int64_t batch, const Fn& fn) {
  for (int64_t n0 = 0; n0 < batch; n0 += kMultiRows)
    with_count<kMultiRows>(batch - n0, [&]<int NN>() { fn.template operator()<NN>(n0); });
}

}  // namespace

void fp8_rows(const Fp8Matrix& w, const float* x, int64_t batch, float* y, int64_t r0, int64_t r1,
              float* scratch) {
  if (batch == 1)
    gemv_fp8(w, x, y, r0, r1, scratch);
  else
    in_groups_of_eight(batch,
                       [&]<int NN>(int64_t n0) { fp8_multi<NN>(w, x, n0, y, r0, r1, scratch); });
}

void bf16_rows(const Bf16Matrix& w, const float* x, int64_t batch, float* y, int64_t r0,
               int64_t r1) {
  if (batch == 1)
    gemv_bf16(w, x, y, r0, r1);
  else
    in_groups_of_eight(batch, [&]<int NN>(int64_t n0) { bf16_multi<NN>(w, x, n0, y, r0, r1); });
}

void fp4_even_odd(const float* x, int64_t batch, int64_t cols, float* xp) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t k = 0; k < batch * cols; k += 32) {
    const __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16);
    _mm512_storeu_ps(xp + k, _mm512_permutex2var_ps(a, even, b));
    _mm512_storeu_ps(xp + k + 16, _mm512_permutex2var_ps(a, odd, b));
  }
}

void fp4_rows(const Fp4Matrix& w, const float* xp, int64_t batch, float* y, int64_t r0,
              int64_t r1) {
  if (batch == 1)
    gemv_fp4(w, xp, y, r0, r1);
  else
    in_groups_of_eight(batch, [&]<int NN>(int64_t n0) { fp4_multi<NN>(w, xp, n0, y, r0, r1); });
}

}  // namespace fathom::kernels::cpu::avx512
