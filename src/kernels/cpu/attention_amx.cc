// One query row of sparse attention on AMX tiles (kernels/attention.h for the contract).
//
// Scores: the entries are the tiles' A operand (16 entries x 32 dims, converted to bf16 as
// they are read) and the heads' queries the B operand (packed once, as the GEMMs pack
// activations), so a score is one chain of tile products over the dims. Softmax: sixteen
// heads a vector, entries in order. Values: the bf16 probabilities are the A operand (16
// heads x 32 entries) and the entries the B operand (pairs of entries interleaved, 16 dims
// a tile), 32 entries a step in the list's order, so only the list decides the sums.
// Tiles: C in tmm0..3, A in tmm4/5, B in tmm6/7, all 16 rows x 64 bytes.
//
// Compiled with -mamx-tile -mamx-bf16 -mavx512f/bw/vl/bf16/vbmi: includes only the private
// AMX headers (attention_amx.h, gemm_amx.h, amx_common.h) and avx512_common.h, and defines
// nothing with linkage the baseline files could share.
#include "kernels/cpu/attention_amx.h"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/amx_common.h"
#include "kernels/cpu/avx512_common.h"
#include "kernels/cpu/gemm_amx.h"

namespace fathom::kernels::cpu::amx {
namespace {

using avx512_common::exp_ps;

// The C tile i (0..3) += A tile a · B tile b, with i known only at run time.
#define FATHOM_TDP(i, a, b)      \
  do {                           \
    switch (i) {                 \
      case 0:                    \
        _tile_dpbf16ps(0, a, b); \
        break;                   \
      case 1:                    \
        _tile_dpbf16ps(1, a, b); \
        break;                   \
      case 2:                    \
        _tile_dpbf16ps(2, a, b); \
        break;                   \
      default:                   \
        _tile_dpbf16ps(3, a, b); \
    }                            \
  } while (0)

void zero_c(int64_t n) {
  _tile_zero(0);
  if (n > 1) _tile_zero(1);
  if (n > 2) _tile_zero(2);
  if (n > 3) _tile_zero(3);
}

void store_c(int64_t i, float* dst, int64_t stride) {
  switch (i) {
    case 0:
      _tile_stored(0, dst, stride);
      break;
    case 1:
      _tile_stored(1, dst, stride);
      break;
    case 2:
      _tile_stored(2, dst, stride);
      break;
    default:
      _tile_stored(3, dst, stride);
  }
}

struct Scratch {
  uint16_t *qp, *abuf, *pt, *pa, *bbuf;
  float *s, *cbuf, *denom;
};

Scratch carve(void* base, int64_t heads, int64_t dim, int64_t n) {
  const int64_t hp = (heads + 15) / 16 * 16, ks = dim / 32, n16 = (n + 15) / 16 * 16,
                n32 = (n + 31) / 32 * 32;
  char* p = static_cast<char*>(base);
  auto take = [&](int64_t bytes) {
    char* at = p;
    p += (bytes + 63) / 64 * 64;
    return at;
  };
  Scratch s;
  s.qp = reinterpret_cast<uint16_t*>(take(packed_x_bytes(heads, dim)));
  s.abuf = reinterpret_cast<uint16_t*>(take(ks * kTileWords * 2));
  s.pt = reinterpret_cast<uint16_t*>(take(n32 * hp * 2));
  s.pa = reinterpret_cast<uint16_t*>(take((hp / 16) * (n32 / 32) * kTileWords * 2));
  s.bbuf = reinterpret_cast<uint16_t*>(take(4 * kTileWords * 2));
  s.s = reinterpret_cast<float*>(take(n16 * hp * 4));
  s.cbuf = reinterpret_cast<float*>(take(4 * kTileFloats * 4));
  s.denom = reinterpret_cast<float*>(take(hp * 4));
  return s;
}

}  // namespace

int64_t attention_scratch_bytes(int64_t heads, int64_t dim, int64_t n) {
  Scratch s = carve(nullptr, heads, dim, n);
  return int64_t(reinterpret_cast<char*>(s.denom)) + ((heads + 15) / 16 * 16) * 4 + 64;
}

void attention_row(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                   int64_t n, const float* sink, float scale, float* out, void* scratch) {
  ensure_tiles();
  const int64_t hp = (heads + 15) / 16 * 16, ht = hp / 16, ks = dim / 32, n32 = (n + 31) / 32 * 32;
  Scratch sc = carve(scratch, heads, dim, n);
  pack_x(q, heads, dim, sc.qp);

  // Scores S[e][h], sixteen entries a tile.
  for (int64_t e0 = 0; e0 < n; e0 += 16) {
    const int64_t rows = min64(16, n - e0);
    for (int64_t k = 0; k < ks; ++k) {
      uint16_t* a = sc.abuf + k * kTileWords;
      for (int64_t r = 0; r < 16; ++r) {
        __m512i v = _mm512_setzero_si512();
        if (r < rows) {
          const float* e = entries[e0 + r] + k * 32;
          v = to_bf16_pairs(_mm512_loadu_ps(e), _mm512_loadu_ps(e + 16));
        }
        _mm512_store_si512(a + r * 32, v);
      }
    }
    zero_c(ht);
    for (int64_t k = 0; k < ks; ++k) {
      _tile_loadd(4, sc.abuf + k * kTileWords, 64);
      for (int64_t t = 0; t < ht; ++t) {
        _tile_loadd(6, sc.qp + (t * ks + k) * kTileWords, 64);
        FATHOM_TDP(t, 4, 6);
      }
    }
    for (int64_t t = 0; t < ht; ++t) store_c(t, sc.s + e0 * hp + t * 16, hp * 4);
  }

  // Softmax per head over the entries in order, sixteen heads a vector; the probabilities
  // in bf16, P^T[e][h] (zero past n).
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t t = 0; t < ht; ++t) {
    __m512 mx = _mm512_set1_ps(-1e30f);
    for (int64_t e = 0; e < n; ++e)
      mx = _mm512_max_ps(mx, _mm512_mul_ps(_mm512_load_ps(sc.s + e * hp + t * 16), vscale));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t e = 0; e < n; ++e) {
      const __m512 p =
          exp_ps(_mm512_sub_ps(_mm512_mul_ps(_mm512_load_ps(sc.s + e * hp + t * 16), vscale), mx));
      sum = _mm512_add_ps(sum, p);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sc.pt + e * hp + t * 16),
                         (__m256i)_mm512_cvtneps_pbh(p));
    }
    for (int64_t e = n; e < n32; ++e)
      _mm256_store_si256(reinterpret_cast<__m256i*>(sc.pt + e * hp + t * 16),
                         _mm256_setzero_si256());
    const __m512 sk = _mm512_maskz_loadu_ps(lanes16(heads - t * 16), sink + t * 16);
    _mm512_store_ps(sc.denom + t * 16, _mm512_add_ps(sum, exp_ps(_mm512_sub_ps(sk, mx))));
    // The A tiles of the value product: P[h][e] for sixteen heads and 32 entries.
    for (int64_t s = 0; s < n32 / 32; ++s) {
      uint16_t* a = sc.pa + (t * (n32 / 32) + s) * kTileWords;
      for (int64_t h = 0; h < 16; ++h)
        for (int64_t j = 0; j < 32; ++j) a[h * 32 + j] = sc.pt[(s * 32 + j) * hp + t * 16 + h];
    }
  }

  // Values: O[h][d] = sum_e P[h][e] entry_e[d], 32 entries a step; up to four C tiles (head
  // tiles x dim tiles) a pass.
  alignas(64) static const uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                       21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                       11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const int64_t dtb = ht == 1 ? 4 : ht == 2 ? 2 : 1;  // dim tiles a pass
  for (int64_t d0 = 0; d0 < dim; d0 += 16 * dtb) {
    const int64_t dts = min64(dtb, (dim - d0) / 16);
    zero_c(ht * dts);
    for (int64_t s = 0; s < n32 / 32; ++s) {
      for (int64_t dt = 0; dt < dts; ++dt) {
        uint16_t* b = sc.bbuf + dt * kTileWords;
        const int64_t d = d0 + dt * 16;
        for (int64_t kp = 0; kp < 16; ++kp) {
          const int64_t e = s * 32 + 2 * kp;
          const __m512 lo = e < n ? _mm512_loadu_ps(entries[e] + d) : _mm512_setzero_ps();
          const __m512 hi = e + 1 < n ? _mm512_loadu_ps(entries[e + 1] + d) : _mm512_setzero_ps();
          _mm512_store_si512(b + kp * 32,
                             _mm512_permutexvar_epi16(interleave, to_bf16_pairs(lo, hi)));
        }
      }
      for (int64_t t = 0; t < ht; ++t) {
        _tile_loadd(4, sc.pa + (t * (n32 / 32) + s) * kTileWords, 64);
        for (int64_t dt = 0; dt < dts; ++dt) {
          _tile_loadd(6, sc.bbuf + dt * kTileWords, 64);
          FATHOM_TDP(t * dts + dt, 4, 6);
        }
      }
    }
    for (int64_t t = 0; t < ht; ++t)
      for (int64_t dt = 0; dt < dts; ++dt) {
        store_c(t * dts + dt, sc.cbuf, 64);
        for (int64_t h = 0; h < min64(16, heads - t * 16); ++h) {
          // o / denom rounded to bf16 (ties to even), stored as fp32.
          const __m512 o =
              _mm512_div_ps(_mm512_load_ps(sc.cbuf + h * 16), _mm512_set1_ps(sc.denom[t * 16 + h]));
          _mm512_storeu_ps(out + (t * 16 + h) * dim + d0 + dt * 16, round_bf16(o));
        }
      }
  }
}

int64_t index_scratch_bytes(int64_t heads, int64_t dim) {
  return packed_x_bytes(heads, dim) + 4 * kTileFloats * 4;
}

void keys_to_bf16(const float* keys, int64_t n, int64_t stride, int64_t dim, uint16_t* out) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t k = 0; k < dim; k += 32) {
      const float* r = keys + j * stride + k;
      _mm512_storeu_si512(out + j * dim + k,
                          to_bf16_pairs(_mm512_loadu_ps(r), _mm512_loadu_ps(r + 16)));
    }
}

// Scores as tile products (keys the A operand, the heads' queries the B operand), then per
// key: bf16(relu(bf16(s)) * w_h) for every head, summed over the heads in order (a 16 x 16
// transpose puts the heads in rows and sixteen keys in the lanes), rounded to bf16.
void index_scores(const float* q, const float* w, int64_t heads, int64_t dim, const uint16_t* keys,
                  int64_t n, float* out, void* scratch) {
  ensure_tiles();
  const int64_t ht = (heads + 15) / 16, ks = dim / 32;
  uint16_t* qp = static_cast<uint16_t*>(scratch);
  float* cbuf = reinterpret_cast<float*>(static_cast<char*>(scratch) + packed_x_bytes(heads, dim));
  pack_x(q, heads, dim, qp);
  for (int64_t e0 = 0; e0 < n; e0 += 16) {
    zero_c(ht);
    for (int64_t k = 0; k < ks; ++k) {
      _tile_loadd(4, keys + e0 * dim + k * 32, dim * 2);
      for (int64_t t = 0; t < ht; ++t) {
        _tile_loadd(6, qp + (t * ks + k) * kTileWords, 64);
        FATHOM_TDP(t, 4, 6);
      }
    }
    __m512 total = _mm512_setzero_ps();
    for (int64_t t = 0; t < ht; ++t) {
      store_c(t, cbuf, 64);
      const __m512 wv = _mm512_maskz_loadu_ps(lanes16(heads - t * 16), w + t * 16);
      __m512i r[16];
      for (int64_t key = 0; key < 16; ++key) {
        const __m512 s =
            _mm512_max_ps(round_bf16(_mm512_load_ps(cbuf + key * 16)), _mm512_setzero_ps());
        r[key] = _mm512_castps_si512(round_bf16(_mm512_mul_ps(s, wv)));
      }
      transpose16(r);
      for (int64_t h = 0; h < min64(16, heads - t * 16); ++h)
        total = _mm512_add_ps(total, _mm512_castsi512_ps(r[h]));
    }
    _mm512_mask_storeu_ps(out + e0, lanes16(n - e0), round_bf16(total));
  }
}

}  // namespace fathom::kernels::cpu::amx
