// One query row of sparse attention with AVX-512 BF16 dot products (kernels/attention.h for
// the contract; the same operands, rounding points and softmax as the AMX row).
//
// Scores: per entry (converted to bf16 once, or already bf16) and head, one 16-lane accumulator
// updated by one VDPBF16PS per 32 dims in order, then summed horizontally in one fixed order.
// Softmax: sixteen heads a vector, entries in order. Values: entries in pairs (2i, 2i + 1) in the
// list's order, interleaved dim by dim, so one VDPBF16PS adds both entries' terms for 16 dims
// of one head (the pair of probabilities broadcast); eight heads and 32 dims a pass. A head's
// numbers depend only on its own query, sink and the list: not on the other heads, where the
// entries sit in memory, or the thread.
//
// Compiled with -mavx512f/bw/vl/bf16: includes only attention_avx512bf16.h and
// avx512_common.h and defines nothing with linkage the baseline files could share.
#include "kernels/cpu/attention_avx512bf16.h"

#include "kernels/cpu/avx512_common.h"

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

namespace fathom::kernels::cpu::avx512bf16 {
namespace {

using avx512_common::exp_ps;
using avx512_common::hsum16x4;
using avx512_common::lanes16;
using avx512_common::with_count;

// 32 floats -> 32 bf16 (ties to even), lo's first.
inline __m512i to_bf16(__m512 lo, __m512 hi) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

inline __m512 dot(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

struct Scratch {
  uint16_t *qb, *eb, *pairs;
  uint32_t* pp;
  float *s, *denom;
};

// hp: heads rounded up to 16; n2: entry pairs.
Scratch carve(void* base, int64_t heads, int64_t dim, int64_t n) {
  const int64_t hp = (heads + 15) / 16 * 16, n2 = (n + 1) / 2;
  char* p = static_cast<char*>(base);
  auto take = [&](int64_t bytes) {
    char* at = p;
    p += (bytes + 63) / 64 * 64;
    return at;
  };
  Scratch s;
  s.qb = reinterpret_cast<uint16_t*>(take(hp * dim * 2));
  s.eb = reinterpret_cast<uint16_t*>(take(dim * 2));
  s.pairs = reinterpret_cast<uint16_t*>(take(n2 * dim * 4));
  s.pp = reinterpret_cast<uint32_t*>(take(hp * n2 * 4));
  s.s = reinterpret_cast<float*>(take(n * hp * 4));
  s.denom = reinterpret_cast<float*>(take(hp * 4));
  return s;
}

// out[h][d0 + 32 dims) for heads [h0, h0 + NH): sum over the pairs of pp[i][h] . pairs[i].
template <int NH>
void values(const Scratch& sc, int64_t dim, int64_t hp, int64_t n2, int64_t h0, int64_t d0,
            float* out) {
  __m512 acc[NH][2];
  for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n2; ++i) {
    const uint16_t* pr = sc.pairs + (i * dim + d0) * 2;
    const __m512i e0 = _mm512_load_si512(pr), e1 = _mm512_load_si512(pr + 32);
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const __m512i p = _mm512_set1_epi32(int(sc.pp[i * hp + h0 + h]));
      acc[h][0] = dot(acc[h][0], p, e0);
      acc[h][1] = dot(acc[h][1], p, e1);
    }
  }
  for (int h = 0; h < NH; ++h) {
    const __m512 dn = _mm512_set1_ps(sc.denom[h0 + h]);
    float* o = out + (h0 + h) * dim + d0;
    // The output rounded to bf16 (ties to even), as a float.
    for (int j = 0; j < 2; ++j) {
      const __m256i b = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_div_ps(acc[h][j], dn)));
      _mm512_storeu_ps(o + 16 * j,
                       _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
    }
  }
}

// The row over entries of type E: float rows are converted to bf16 as they are used (scores)
// and paired; bf16 rows are read as they are.
template <typename E>
void row(const float* q, int64_t heads, int64_t dim, const E* const* entries, int64_t n,
         const float* sink, float scale, float* out, void* scratch) {
  const int64_t hp = (heads + 15) / 16 * 16, ks = dim / 32, n2 = (n + 1) / 2;
  Scratch sc = carve(scratch, heads, dim, n);
  for (int64_t i = 0; i < hp * dim; i += 32)
    _mm512_store_si512(sc.qb + i, i < heads * dim
                                      ? to_bf16(_mm512_loadu_ps(q + i), _mm512_loadu_ps(q + i + 16))
                                      : _mm512_setzero_si512());

  // Scores S[e][h] (heads past `heads` zero), and the entries as interleaved pairs.
  for (int64_t e = 0; e < n; ++e) {
    const uint16_t* eb = nullptr;
    if constexpr (std::is_same_v<E, float>) {
      for (int64_t k = 0; k < ks; ++k)
        _mm512_store_si512(sc.eb + k * 32, to_bf16(_mm512_loadu_ps(entries[e] + k * 32),
                                                   _mm512_loadu_ps(entries[e] + k * 32 + 16)));
      eb = sc.eb;
    } else {
      eb = entries[e];
    }
    // Eight heads' chains side by side (the heads past `heads` have a zero query).
    float* srow = sc.s + e * hp;
    for (int64_t h0 = 0; h0 < hp; h0 += 8) {
      __m512 acc[8];
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int64_t k = 0; k < ks; ++k) {
        const __m512i ev = _mm512_loadu_si512(eb + k * 32);
        for (int j = 0; j < 8; ++j)
          acc[j] = dot(acc[j], _mm512_load_si512(sc.qb + (h0 + j) * dim + k * 32), ev);
      }
      for (int j = 0; j < 8; j += 4)
        _mm_storeu_ps(srow + h0 + j, hsum16x4(acc[j], acc[j + 1], acc[j + 2], acc[j + 3]));
    }
  }
  // Pair i holds dims d of entries 2i and 2i + 1 side by side: lo0 hi0 lo1 hi1 ...
  if constexpr (std::is_same_v<E, float>) {
    alignas(64) static const uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                         21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                         11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i interleave = _mm512_load_si512(kInterleave);
    for (int64_t i = 0; i < n2; ++i) {
      const float* lo_row = entries[2 * i];
      const float* hi_row = 2 * i + 1 < n ? entries[2 * i + 1] : nullptr;
      for (int64_t d = 0; d < dim; d += 16) {
        const __m512 lo = _mm512_loadu_ps(lo_row + d);
        const __m512 hi = hi_row ? _mm512_loadu_ps(hi_row + d) : _mm512_setzero_ps();
        _mm512_store_si512(sc.pairs + (i * dim + d) * 2,
                           _mm512_permutexvar_epi16(interleave, to_bf16(lo, hi)));
      }
    }
  } else {
    // Dims d..d+15 of both rows (words 0..15 of lo, 32..47 of hi), then d+16..d+31.
    alignas(64) static const uint16_t kFirst[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                    37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                    11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i first = _mm512_load_si512(kFirst);
    const __m512i second = _mm512_add_epi16(first, _mm512_set1_epi16(16));
    for (int64_t i = 0; i < n2; ++i) {
      const uint16_t* lo_row = entries[2 * i];
      const uint16_t* hi_row = 2 * i + 1 < n ? entries[2 * i + 1] : nullptr;
      for (int64_t d = 0; d < dim; d += 32) {
        const __m512i lo = _mm512_loadu_si512(lo_row + d);
        const __m512i hi = hi_row ? _mm512_loadu_si512(hi_row + d) : _mm512_setzero_si512();
        _mm512_store_si512(sc.pairs + (i * dim + d) * 2, _mm512_permutex2var_epi16(lo, first, hi));
        _mm512_store_si512(sc.pairs + (i * dim + d + 16) * 2,
                           _mm512_permutex2var_epi16(lo, second, hi));
      }
    }
  }

  // Softmax per head over the entries in order, sixteen heads a vector; the probabilities in
  // bf16 as pairs pp[i][h] (entry 2i low, 2i + 1 high; zero past n).
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t t = 0; t < hp / 16; ++t) {
    __m512 mx = _mm512_set1_ps(-1e30f);
    for (int64_t e = 0; e < n; ++e)
      mx = _mm512_max_ps(mx, _mm512_mul_ps(_mm512_loadu_ps(sc.s + e * hp + t * 16), vscale));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t e = 0; e < n; ++e) {
      const __m512 p =
          exp_ps(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(sc.s + e * hp + t * 16), vscale), mx));
      sum = _mm512_add_ps(sum, p);
      // The bf16 probabilities replace the scores (16 bits each, in the row's first half).
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(sc.s + e * hp + t * 16),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p)));
    }
    const __m512 sk = _mm512_maskz_loadu_ps(lanes16(heads - t * 16), sink + t * 16);
    _mm512_storeu_ps(sc.denom + t * 16, _mm512_add_ps(sum, exp_ps(_mm512_sub_ps(sk, mx))));
    for (int64_t i = 0; i < n2; ++i) {
      const __m512i lo = _mm512_cvtepu16_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc.s + 2 * i * hp + t * 16)));
      const __m512i hi =
          2 * i + 1 < n ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                              reinterpret_cast<const __m256i*>(sc.s + (2 * i + 1) * hp + t * 16)))
                        : _mm512_setzero_si512();
      _mm512_storeu_si512(sc.pp + i * hp + t * 16, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }

  // Values, eight heads and 32 dims a pass.
  for (int64_t d0 = 0; d0 < dim; d0 += 32)
    for (int64_t h0 = 0; h0 < heads; h0 += 8)
      with_count<8>(heads - h0, [&]<int NH>() { values<NH>(sc, dim, hp, n2, h0, d0, out); });
}

}  // namespace

int64_t attention_scratch_bytes(int64_t heads, int64_t dim, int64_t n) {
  Scratch s = carve(nullptr, heads, dim, n);
  return int64_t(reinterpret_cast<char*>(s.denom)) + ((heads + 15) / 16 * 16) * 4 + 64;
}

void attention_row(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                   int64_t n, const float* sink, float scale, float* out, void* scratch) {
  row(q, heads, dim, entries, n, sink, scale, out, scratch);
}

void attention_row(const float* q, int64_t heads, int64_t dim, const uint16_t* const* entries,
                   int64_t n, const float* sink, float scale, float* out, void* scratch) {
  row(q, heads, dim, entries, n, sink, scale, out, scratch);
}

void rows_to_bf16(const float* rows, int64_t n, int64_t dim, uint16_t* out) {
  for (int64_t i = 0; i < n * dim; i += 32)
    _mm512_storeu_si512(out + i,
                        to_bf16(_mm512_loadu_ps(rows + i), _mm512_loadu_ps(rows + i + 16)));
}

}  // namespace fathom::kernels::cpu::avx512bf16
