// AVX-512 (F/BW/VL) GEMVs and their batched twins for FP8, FP4 and BF16 weights. Decoding
// happens in registers as in gemv_avx2.cc, sixteen lanes wide: FP8 E4M3 re-biased to FP16
// and converted (vcvtph2ps), FP4 E2M1 looked up in a 16-entry float table already
// multiplied by the block's power-of-two scale (vpermps indexes by the low four bits, so a
// nibble needs no masking), BF16 by a shift. Scaling by a power of two is exact, so folding
// a scale into the table or into x changes no product.
//
// Compiled with -mavx512*: this file includes only gemv_avx512.h and defines nothing with
// linkage the baseline files could share (see gemv_avx512.h).
#include "kernels/cpu/gemv_avx512.h"

#include <immintrin.h>

#include <cstdint>

namespace fathom::kernels::cpu::avx512 {
namespace {

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// UE8M0 as kernels::e8m0_to_float: 2^(b - 127); 0xFF is NaN.
float e8m0(uint8_t b) {
  const uint32_t bits = b == 0 ? 0x00400000u : b == 0xFF ? 0x7FC00000u : uint32_t(b) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// The one horizontal sum every row ends with.
float hsum16(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
  return _mm_cvtss_f32(b);
}

// Lanes [0, n) of 16 (n may be <= 0 or >= 16).
__mmask16 lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
__mmask32 lanes32(int64_t n) {
  return n >= 32 ? __mmask32(0xFFFFFFFFu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
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

inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

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

// Four rows (pointers may repeat) against one scaled x; acc [4][2].
inline void fp8_four_rows(const uint8_t* const wr[4], const float* xs, int64_t K, __m512 acc[8]) {
  const int64_t full = K / 32, chunks = (K + 31) / 32;
  for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < full; ++c) {
    if ((c & 1) == 0)
      for (int r = 0; r < 4; ++r) prefetch(wr[r] + c * 32 + 4096);
    const __m512 x0 = _mm512_loadu_ps(xs + c * 32), x1 = _mm512_loadu_ps(xs + c * 32 + 16);
    for (int r = 0; r < 4; ++r) {
      __m512 lo, hi;
      e4m3x32(wr[r] + c * 32, &lo, &hi);
      acc[2 * r] = _mm512_fmadd_ps(lo, x0, acc[2 * r]);
      acc[2 * r + 1] = _mm512_fmadd_ps(hi, x1, acc[2 * r + 1]);
    }
  }
  if (full < chunks) {
    const __mmask32 m = lanes32(K - full * 32);
    const __m512 x0 = _mm512_loadu_ps(xs + full * 32), x1 = _mm512_loadu_ps(xs + full * 32 + 16);
    for (int r = 0; r < 4; ++r) {
      __m512 lo, hi;
      e4m3x32(wr[r] + full * 32, m, &lo, &hi);
      acc[2 * r] = _mm512_fmadd_ps(lo, x0, acc[2 * r]);
      acc[2 * r + 1] = _mm512_fmadd_ps(hi, x1, acc[2 * r + 1]);
    }
  }
}

void gemv_fp8(const Fp8Matrix& w, const float* x, float* y, int64_t r0, int64_t r1, float* xs) {
  const int64_t K = w.cols;
  int64_t band = -1;
  for (int64_t m = r0; m < r1;) {
    if (m / 32 != band) {
      band = m / 32;
      scale_x_fp8(w, x, band, xs);
    }
    const int64_t nr = min64(4, min64(r1, (band + 1) * 32) - m);
    const uint8_t* wr[4];
    for (int r = 0; r < 4; ++r) wr[r] = w.weight + (m + (r < nr ? r : 0)) * K;
    __m512 acc[8];
    fp8_four_rows(wr, xs, K, acc);
    for (int64_t r = 0; r < nr; ++r) y[m + r] = hsum16(_mm512_add_ps(acc[2 * r], acc[2 * r + 1]));
    m += nr;
  }
}

// ---- FP4: E2M1 pairs, UE8M0 scale per 32 columns -----------------------------------------
//
// Row m, block kb: t = table * s (exact), acc0 += t[even codes] * x[even columns],
// acc1 += t[odd codes] * x[odd columns] (FMAs; x in even/odd order, xp).

const float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Scales of blocks [kb0, kb0 + n) of one row as floats (n <= 16), as e8m0() gives them.
inline void e8m0x16(const uint8_t* p, int64_t n, float out[16]) {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes16(n), p));
  __m512i bits = _mm512_slli_epi32(b, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                               _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xFF)),
                               _mm512_set1_epi32(0x7FC00000));
  _mm512_storeu_ps(out, _mm512_castsi512_ps(bits));
}

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
  for (int64_t m = r0; m < r1; m += 4) {
    const int64_t nr = min64(4, r1 - m);
    const bool prefetch_next = m + 8 <= r1;
    const uint8_t* wr[4];
    const uint8_t* sr[4];
    for (int r = 0; r < 4; ++r) {
      const int64_t row = m + (r < nr ? r : 0);
      wr[r] = w.weight + row * stride;
      sr[r] = w.scale + row * kbs;
    }
    __m512 acc[8];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t kb0 = 0; kb0 < kbs; kb0 += 16) {
      const int64_t nb = min64(16, kbs - kb0);
      float sc[4][16];
      for (int r = 0; r < 4; ++r) e8m0x16(sr[r] + kb0, nb, sc[r]);
      for (int64_t j = 0; j < nb; ++j) {
        const int64_t kb = kb0 + j;
        if (prefetch_next && (kb & 3) == 0)
          for (int r = 0; r < 4; ++r) prefetch(wr[r] + 4 * stride + kb * 16);
        const __m512 xe = _mm512_loadu_ps(xp + kb * 32), xo = _mm512_loadu_ps(xp + kb * 32 + 16);
        for (int r = 0; r < 4; ++r) {
          __m512 ev, od;
          fp4_block(wr[r] + kb * 16, sc[r][j], table, &ev, &od);
          acc[2 * r] = _mm512_fmadd_ps(ev, xe, acc[2 * r]);
          acc[2 * r + 1] = _mm512_fmadd_ps(od, xo, acc[2 * r + 1]);
        }
      }
    }
    for (int64_t r = 0; r < nr; ++r) y[m + r] = hsum16(_mm512_add_ps(acc[2 * r], acc[2 * r + 1]));
  }
}

// ---- The batched driver ------------------------------------------------------------------
//
// Up to 16 rows (one FP8 scale band at most) are decoded into a tile of floats, the values the
// GEMV's registers hold, and multiplied with every activation row; four tile rows and two
// activation rows share each pass (16 accumulators), while each (row, activation) pair keeps
// the GEMV's two accumulators, chunk order and final sum. The columns are walked in blocks of
// 2048: a block of four tile rows (32 KB) stays in L1 while every activation row passes, the
// accumulators are saved between blocks (exactly: they are stored, not summed), and each
// activation row is read from L2 or L3 once per 16 weight rows.

constexpr int64_t kTileRows = 16, kBlockChunks = 64;

// Chunks [c0, c1) of four tile rows (kpad floats apart) times NN activation rows n0..,
// continuing from `state` (zeros when c0 == 0). At the end of the row (c1 == chunks) the
// sums go to out[j * 4 + r], else the accumulators back to `state`.
template <int NN, class LoadX>
inline void four_rows_times(const float* tile, int64_t kpad, int64_t c0, int64_t c1, int64_t chunks,
                            int64_t n0, const LoadX& load_x, float* state, float* out) {
  __m512 acc[NN][8];
  for (int j = 0; j < NN; ++j)
    for (int v = 0; v < 8; ++v)
      acc[j][v] = c0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(state + (j * 8 + v) * 16);
  for (int64_t c = c0; c < c1; ++c) {
    __m512 xv[NN][2];
    for (int j = 0; j < NN; ++j) load_x(n0 + j, c, &xv[j][0], &xv[j][1]);
    for (int r = 0; r < 4; ++r) {
      const __m512 t0 = _mm512_loadu_ps(tile + r * kpad + c * 32),
                   t1 = _mm512_loadu_ps(tile + r * kpad + c * 32 + 16);
      for (int j = 0; j < NN; ++j) {
        acc[j][2 * r] = _mm512_fmadd_ps(t0, xv[j][0], acc[j][2 * r]);
        acc[j][2 * r + 1] = _mm512_fmadd_ps(t1, xv[j][1], acc[j][2 * r + 1]);
      }
    }
  }
  if (c1 < chunks) {
    for (int j = 0; j < NN; ++j)
      for (int v = 0; v < 8; ++v) _mm512_storeu_ps(state + (j * 8 + v) * 16, acc[j][v]);
    return;
  }
  for (int j = 0; j < NN; ++j)
    for (int r = 0; r < 4; ++r)
      out[j * 4 + r] = hsum16(_mm512_add_ps(acc[j][2 * r], acc[j][2 * r + 1]));
}

// Rows [r0, r1) of y [batch, rows]. block_end(m): the first row m's
// tile may not reach; decode(m, dst): row m's kpad tile floats; start(m): called once per
// tile before the products; load_x(n, c, &x0, &x1): chunk c of activation row n as the GEMV
// multiplies it. REQUIRES: tile holds scratch_floats(K, batch) floats: the tile (16 * kpad),
// kpad for the caller, then the accumulator state (every quad of tile rows, every pair of
// activation rows: 16 vectors of 16 floats).
template <class BlockEnd, class Decode, class Start, class LoadX>
void batched(int64_t rows, int64_t r0, int64_t r1, int64_t kpad, int64_t batch, float* y,
             float* tile, const BlockEnd& block_end, const Decode& decode, const Start& start,
             const LoadX& load_x) {
  const int64_t chunks = kpad / 32;
  float* state = tile + 17 * kpad;
  for (int64_t m0 = r0; m0 < r1;) {
    const int64_t nr = min64(kTileRows, min64(r1, block_end(m0)) - m0);
    const int64_t quads = (nr + 3) / 4;
    for (int64_t r = 0; r < quads * 4; ++r) decode(m0 + min64(r, nr - 1), tile + r * kpad);
    start(m0);
    for (int64_t c0 = 0; c0 < chunks; c0 += kBlockChunks) {
      const int64_t c1 = min64(chunks, c0 + kBlockChunks);
      for (int64_t q = 0; q < quads; ++q) {
        for (int64_t n0 = 0; n0 < batch; n0 += 2) {
          const int nn = n0 + 1 < batch ? 2 : 1;
          float* st = state + (q * ((batch + 1) / 2) + n0 / 2) * 256;
          float out[8];
          if (nn == 2)
            four_rows_times<2>(tile + q * 4 * kpad, kpad, c0, c1, chunks, n0, load_x, st, out);
          else
            four_rows_times<1>(tile + q * 4 * kpad, kpad, c0, c1, chunks, n0, load_x, st, out);
          if (c1 < chunks) continue;
          for (int j = 0; j < nn; ++j)
            for (int64_t r = 0; r < 4 && q * 4 + r < nr; ++r)
              y[(n0 + j) * rows + m0 + q * 4 + r] = out[j * 4 + r];
        }
      }
    }
    m0 += nr;
  }
}

// FP8: tile rows hold w * 2^-8; chunk c of x is scaled by the band's s * 256 as
// scale_x_fp8 scales it.
void matmul_fp8(const Fp8Matrix& w, const float* x, int64_t batch, float* y, int64_t r0, int64_t r1,
                float* scratch) {
  const int64_t K = w.cols, chunks = (K + 31) / 32, full = K / 32, kpad = chunks * 32;
  float* tile = scratch;
  float* sv = scratch + kTileRows * kpad;
  batched(
      w.rows, r0, r1, kpad, batch, y, tile, [](int64_t m) { return (m / 32 + 1) * 32; },
      [&](int64_t m, float* t) {
        const uint8_t* wr = w.weight + m * K;
        for (int64_t c = 0; c < chunks; ++c) {
          __m512 lo, hi;
          e4m3x32(wr + c * 32, lanes32(K - c * 32), &lo, &hi);
          _mm512_storeu_ps(t + c * 32, lo);
          _mm512_storeu_ps(t + c * 32 + 16, hi);
        }
      },
      [&](int64_t m) {
        for (int64_t c = 0; c < chunks; ++c) sv[c] = e8m0(w.scale[(m / 32) * chunks + c]) * 256.0f;
      },
      [&](int64_t n, int64_t c, __m512* x0, __m512* x1) {
        const float* p = x + n * K + c * 32;
        const __m512 s = _mm512_set1_ps(sv[c]);
        if (c < full) {
          *x0 = _mm512_mul_ps(_mm512_loadu_ps(p), s);
          *x1 = _mm512_mul_ps(_mm512_loadu_ps(p + 16), s);
        } else {
          *x0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes16(K - c * 32), p), s);
          *x1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes16(K - c * 32 - 16), p + 16), s);
        }
      });
}

// FP4: tile rows hold the scaled weights even then odd per block, x is in even/odd order.
void matmul_fp4(const Fp4Matrix& w, const float* xp, int64_t batch, float* y, int64_t r0,
                int64_t r1, float* tile) {
  const int64_t K = w.cols, kbs = K / 32, stride = K / 2;
  const __m512 table = _mm512_loadu_ps(kE2m1);
  batched(
      w.rows, r0, r1, K, batch, y, tile, [&](int64_t) { return w.rows; },
      [&](int64_t m, float* t) {
        for (int64_t kb0 = 0; kb0 < kbs; kb0 += 16) {
          const int64_t nb = min64(16, kbs - kb0);
          float sc[16];
          e8m0x16(w.scale + m * kbs + kb0, nb, sc);
          for (int64_t j = 0; j < nb; ++j) {
            const int64_t kb = kb0 + j;
            __m512 ev, od;
            fp4_block(w.weight + m * stride + kb * 16, sc[j], table, &ev, &od);
            _mm512_storeu_ps(t + kb * 32, ev);
            _mm512_storeu_ps(t + kb * 32 + 16, od);
          }
        }
      },
      [](int64_t) {},
      [&](int64_t n, int64_t c, __m512* xe, __m512* xo) {
        *xe = _mm512_loadu_ps(xp + n * K + c * 32);
        *xo = _mm512_loadu_ps(xp + n * K + c * 32 + 16);
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
    for (int64_t r = 0; r < nr; ++r) y[m + r] = hsum16(_mm512_add_ps(acc[2 * r], acc[2 * r + 1]));
  }
}

// BF16: tile rows hold the weights as floats, zero beyond K.
void matmul_bf16(const Bf16Matrix& w, const float* x, int64_t batch, float* y, int64_t r0,
                 int64_t r1, float* tile) {
  const int64_t K = w.cols, chunks = (K + 31) / 32, full = K / 32, kpad = chunks * 32;
  batched(
      w.rows, r0, r1, kpad, batch, y, tile, [&](int64_t) { return w.rows; },
      [&](int64_t m, float* t) {
        const uint16_t* wr = w.weight + m * K;
        for (int64_t k = 0; k < kpad; k += 16)
          _mm512_storeu_ps(t + k, bf16x16(wr + k, lanes16(K - k)));
      },
      [](int64_t) {},
      [&](int64_t n, int64_t c, __m512* x0, __m512* x1) {
        const float* p = x + n * K + c * 32;
        if (c < full) {
          *x0 = _mm512_loadu_ps(p);
          *x1 = _mm512_loadu_ps(p + 16);
        } else {
          *x0 = _mm512_maskz_loadu_ps(lanes16(K - c * 32), p);
          *x1 = _mm512_maskz_loadu_ps(lanes16(K - c * 32 - 16), p + 16);
        }
      });
}

}  // namespace

void fp8_rows(const Fp8Matrix& w, const float* x, int64_t batch, float* y, int64_t r0, int64_t r1,
              float* scratch) {
  if (batch == 1)
    gemv_fp8(w, x, y, r0, r1, scratch);
  else
    matmul_fp8(w, x, batch, y, r0, r1, scratch);
}

void bf16_rows(const Bf16Matrix& w, const float* x, int64_t batch, float* y, int64_t r0, int64_t r1,
               float* scratch) {
  if (batch == 1)
    gemv_bf16(w, x, y, r0, r1);
  else
    matmul_bf16(w, x, batch, y, r0, r1, scratch);
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

void fp4_rows(const Fp4Matrix& w, const float* xp, int64_t batch, float* y, int64_t r0, int64_t r1,
              float* scratch) {
  if (batch == 1)
    gemv_fp4(w, xp, y, r0, r1);
  else
    matmul_fp4(w, xp, batch, y, r0, r1, scratch);
}

}  // namespace fathom::kernels::cpu::avx512
