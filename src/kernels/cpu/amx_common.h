// What the AMX files (gemm_amx.cc, attention_amx.cc) share: the tile configuration and the
// small AVX-512 helpers both use. Private to kernels/cpu; include only from files compiled
// with the AMX and AVX-512 flags (it uses their intrinsics inline).
#pragma once

#include <immintrin.h>

#include <cstdint>

#define FATHOM_INLINE inline __attribute__((always_inline))

namespace fathom::kernels::cpu::amx {

constexpr int64_t kTileWords = 512;   // bf16 values in a 16 x 64-byte tile
constexpr int64_t kTileFloats = 256;  // fp32 values in a 16 x 64-byte tile

// Configures this thread's tiles as all eight 16 rows x 64 bytes, unless they are already;
// every kernel calls it (or configure_narrow_tiles) before its first tile instruction.
// Defined in gemm_amx.cc.
void ensure_tiles();
// Configures this thread's C tiles (tmm0..3) and B tiles (tmm6, 7) as 16 rows x 4*columns
// bytes (1 <= columns <= 16), the A tiles (tmm4, 5) as 16 x 64; a no-op when they already are.
void configure_narrow_tiles(int64_t columns);

FATHOM_INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Prefetches the line at p into L2 (PREFETCHT1). An asm statement, not _mm_prefetch: GCC 12
// deleted the __builtin_prefetch of gemm_amx.cc's stream loop as dead code at -O2, and at -O3
// after an unrelated change to the loop.
FATHOM_INLINE void prefetch_l2(const void* p) {
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

// The mask of the first n lanes (none for n <= 0, all for n >= 16).
FATHOM_INLINE __mmask16 lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// v rounded to bf16 (ties to even), as fp32.
FATHOM_INLINE __m512 round_bf16(__m512 v) {
  const __m256i b = (__m256i)_mm512_cvtneps_pbh(v);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// 32 floats (lo: the first 16) as 16 bf16 pairs, rounded to nearest even.
FATHOM_INLINE __m512i to_bf16_pairs(__m512 lo, __m512 hi) {
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// r[k] = column k of the 16 x 16 dword matrix whose rows are r[0..15].
FATHOM_INLINE void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
  }
}

}  // namespace fathom::kernels::cpu::amx
