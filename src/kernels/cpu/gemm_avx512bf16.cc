// AVX-512 BF16 products (VDPBF16PS) for FP8, FP4 and BF16 weights: the GEMV decodes weight
// rows in registers per 32-column chunk (FP8/FP4: two streams of rows, a row of each a pass;
// BF16: four adjacent rows); a batch decodes four weight rows into an L1 panel once and
// multiplies it with up to six activation rows at a time (24 accumulators).
// Both run the one per-output sequence gemm_avx512bf16.h defines, so they agree bit for bit.
//
// Decoding: FP8 E4M3 times its block's power-of-two scale is one bf16 value (4 significant
// bits), built from the code's bits (Fp8Decoder says how); FP4 E2M1 codes index a 16-entry bf16
// table already multiplied by the block's scale (VPERMW): a whole 64-column block's even
// columns (the bytes' low nibbles) and then its odd ones (e2m1_even_odd), a lone last chunk in
// column order (e2m1_words).
//
// Compiled with -mavx512bf16: this file includes only gemm_avx512bf16.h and avx512_common.h
// (static helpers) and defines nothing with linkage the baseline files could share (see
// gemv_avx512.h).
#include "kernels/cpu/gemm_avx512bf16.h"

#include "kernels/cpu/avx512_common.h"

#include <immintrin.h>

#include <cstdint>

namespace fathom::kernels::cpu::avx512bf16 {
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

// acc += the chunk's 16 pair products: the only arithmetic an output sees before hsum16.
inline __m512 dot(__m512 acc, __m512i x, __m512i w) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(x), reinterpret_cast<__m512bh>(w));
}

// ---- Decoders: chunk c (columns [32c, 32c + 32)) of one weight row as 32 bf16 -------------

// FP8, per chunk of a 32-row band: where the scale 2^(s - 127) keeps every E4M3 value times
// it a normal number (10 <= s <= 246), the bf16 bits are built directly: the code
// sign-extended to 16 bits and shifted left by 4 holds the sign at bit 15 and the exponent and
// mantissa at bits 10..4; masked, plus (s - 7) << 7 (re-biasing 7 -> 127 and scaling), that is
// a normal code's bf16 value. Codes with a zero exponent (subnormals and zero, rare in
// quantized weights) are looked up in an 8-entry table already scaled, only in chunks that
// have them. Other scales take the float route: the E4M3 byte re-biased to FP16, converted,
// multiplied by 256 and by the scale, and rounded to bf16: exact wherever the value is a
// normal fp32 number (above 2^128 it is inf, as the value is out of fp32's range; below
// 2^-126 it becomes zero, as VDPBF16PS would read it). Where both routes apply they give the
// same bits; 0x7F decodes as 480 on both (the fast paths have no NaN codes).
struct Fp8Scale {
  bool direct;
  int s;                  // the scale byte
  __m512i normal_offset;  // direct: (s - 7) << 7 in each word
  __m512 times;           // float route: the scale
};

// bf16 of m 2^-9 for m = 0..7 (E4M3 codes with a zero exponent).
alignas(64) const uint16_t kE4m3Subnormals[32] = {0,      0x3B00, 0x3B80, 0x3BC0,
                                                  0x3C00, 0x3C20, 0x3C40, 0x3C60};

struct Fp8Decoder {
  // Whether scale byte s takes the direct route, and its offset there.
  static bool takes_direct(int s) { return s >= 10 && s <= 246; }
  static uint16_t direct_offset_bits(int s) { return uint16_t((s - 7) << 7); }
  static __m512i direct_offset(int s) { return _mm512_set1_epi16(short(direct_offset_bits(s))); }
  const Fp8Matrix& w;
  int64_t chunks, full;
  const uint8_t* row(int64_t m) const { return w.weight + m * w.cols; }
  // Row m's band's scale for chunk c.
  Fp8Scale scale(int64_t m, int64_t c) const {
    const int s = w.scale[(m / 32) * chunks + c];
    Fp8Scale r{};
    r.s = s;
    r.direct = takes_direct(s);
    if (r.direct) {
      r.normal_offset = direct_offset(s);
    } else {
      float f[16];
      e8m0x16(w.scale + (m / 32) * chunks + c, 1, f);
      r.times = _mm512_set1_ps(f[0]);
    }
    return r;
  }
  // 32 codes whose scale byte s takes the direct route (offset: (s - 7) << 7 in each word).
  static __m512i direct(__m256i raw, int s, __m512i offset) {
    const __m512i v = _mm512_cvtepi8_epi16(raw);
    const __m512i t = _mm512_add_epi16(
        _mm512_and_si512(_mm512_slli_epi16(v, 4), _mm512_set1_epi16(short(0x87F0))), offset);
    const __mmask32 zero_exponent = _mm256_testn_epi8_mask(raw, _mm256_set1_epi8(0x78));
    if (__builtin_expect(zero_exponent == 0, 1)) return t;
    // m 2^-9 times the scale, from the table (index: the code's low five bits, the
    // exponent's two low bits being zero), with the code's sign (bit 15 of v).
    const __m512i base = _mm512_load_si512(kE4m3Subnormals);
    const __m512i subnormals = _mm512_mask_add_epi16(base, __mmask32(0xFE), base,
                                                     _mm512_set1_epi16(short((s - 127) << 7)));
    const __m512i looked_up = _mm512_ternarylogic_epi32(_mm512_permutexvar_epi16(v, subnormals), v,
                                                        _mm512_set1_epi16(short(0x8000)), 0xF8);
    return _mm512_mask_mov_epi16(t, zero_exponent, looked_up);
  }
  __m512i chunk(const uint8_t* p, int64_t c, const Fp8Scale& s) const {
    const __m256i raw = c < full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c * 32))
                                 : _mm256_maskz_loadu_epi8(lanes32(w.cols - c * 32), p + c * 32);
    if (s.direct) return direct(raw, s.s, s.normal_offset);
    __m512i v = _mm512_cvtepi8_epi16(raw);
    v = _mm512_and_si512(_mm512_slli_epi16(v, 7), _mm512_set1_epi16(short(0xBF80)));
    // The E4M3 value (times 2^-8, times 256), then times the scale: each product exact.
    const __m512 k256 = _mm512_set1_ps(256.0f);
    const __m512 lo =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(v)), k256), s.times);
    const __m512 hi = _mm512_mul_ps(
        _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)), k256), s.times);
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  }
};

// E2M1 codes 0..15 as bf16 bits, twice (VPERMW reads an index's low five bits, and the low
// word's index is the whole byte).
alignas(64) constexpr uint16_t kE2m1Bf16[32] = {
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80,
    0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0, 0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040,
    0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};

const float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// VPSHUFB indexes (within each 16-byte lane, the 16 bytes broadcast to every lane) that make
// word 2i and word 2i + 1 both byte i (i < 16).
alignas(64) const uint8_t kByteTwice[64] = {
    0,  0,  0,  0,  1,  1,  1,  1,  2,  2,  2,  2,  3,  3,  3,  3,  4,  4,  4,  4,  5,  5,
    5,  5,  6,  6,  6,  6,  7,  7,  7,  7,  8,  8,  8,  8,  9,  9,  9,  9,  10, 10, 10, 10,
    11, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15};

// 32 E2M1 codes (16 bytes at p, the low nibble the even column) as the bf16 values of table
// `tb`: words 2i and 2i + 1 both byte i (the bytes broadcast to every lane, then VPSHUFB with
// `twice`, kByteTwice), the odd words shifted right by 4, then VPERMW: word 2i's low nibble
// picks (bit 4 lands in the table's copy), word 2i + 1's is the high nibble.
inline __m512i e2m1_words(const uint8_t* p, __m512i tb, __m512i twice) {
  const __m512i d = _mm512_shuffle_epi8(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), twice);
  return _mm512_permutexvar_epi16(_mm512_mask_srli_epi16(d, __mmask32(0xAAAAAAAAu), d, 4), tb);
}

// kScaledE2m1Bf16[s]: the E2M1 table (kE2m1Bf16, twice) times 2^(s - 127) for the scales the
// direct route takes (2 <= s <= 252): its bits plus (s - 127) << 7 in every nonzero entry.
// A chunk loads its block's table (a load, where building it took a broadcast and an add on
// the shuffle-bound decode path). 16 KiB; the few scales a checkpoint uses stay in L1.
struct ScaledE2m1Tables {
  alignas(64) uint16_t t[256][32];
};
constexpr ScaledE2m1Tables scaled_e2m1_tables() {
  ScaledE2m1Tables out{};
  for (int s = 2; s <= 252; ++s)
    for (int i = 0; i < 32; ++i)
      out.t[s][i] = uint16_t(kE2m1Bf16[i] + ((i & 7) != 0 ? (s - 127) * 128 : 0));
  return out;
}
constexpr ScaledE2m1Tables kScaledE2m1Bf16 = scaled_e2m1_tables();

// The scales of 16 blocks of one FP4 row. Where every scale keeps the table's nonzero values
// times it normal bf16 numbers (2 <= s <= 252), each block's table is kScaledE2m1Bf16[s];
// otherwise every block's table is the fp32 table times the scale, rounded to bf16 (the same
// bits where both apply; out of fp32's range as the FP8 float route).
struct Fp4Scales {
  bool direct;
  const uint8_t* bytes;  // the 16 scale bytes (fewer at the row's end)
  alignas(64) float value[16];
};

struct Fp4Decoder {
  const Fp4Matrix& w;
  const uint8_t* row(int64_t m) const { return w.weight + m * (w.cols / 2); }
  // Row m's scales for blocks [c0, c0 + 16).
  void block_scales(int64_t m, int64_t c0, Fp4Scales& out) const {
    const int64_t n = min64(16, w.cols / 32 - c0);
    const uint8_t* p = w.scale + m * (w.cols / 32) + c0;
    const __m256i b = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(lanes16(n), p));
    const __mmask16 out_of_range =
        _mm256_mask_cmpgt_epi16_mask(lanes16(n), b, _mm256_set1_epi16(252)) |
        _mm256_mask_cmplt_epi16_mask(lanes16(n), b, _mm256_set1_epi16(2));
    out.direct = out_of_range == 0;
    out.bytes = p;
    if (!out.direct) e8m0x16(p, n, out.value);
  }
  // Block i's table (of its group of 16): kScaledE2m1Bf16's, or built from the scale.
  static __m512i table(const Fp4Scales& s, int64_t i) {
    if (s.direct) return _mm512_load_si512(kScaledE2m1Bf16.t[s.bytes[i]]);
    const __m512 t = _mm512_mul_ps(_mm512_loadu_ps(kE2m1), _mm512_set1_ps(s.value[i]));
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(t, t));
  }
  // Blocks i and i + 1 (i even): block i's table in words 0-15, block i + 1's in 16-31.
  static __m512i pair_table(const Fp4Scales& s, int64_t i) {
    if (s.direct)
      return _mm512_mask_loadu_epi16(_mm512_load_si512(kScaledE2m1Bf16.t[s.bytes[i]]),
                                     __mmask32(0xFFFF0000u), kScaledE2m1Bf16.t[s.bytes[i + 1]]);
    return _mm512_mask_blend_epi16(__mmask32(0xFFFF0000u), table(s, i), table(s, i + 1));
  }
  // Chunk c (block i of its group of 16) as bf16, its columns in order (the row's last chunk
  // when the row has an odd number of them).
  __m512i chunk(const uint8_t* p, const Fp4Scales& s, int64_t i, int64_t c) const {
    return e2m1_words(p + c * 16, table(s, i), _mm512_load_si512(kByteTwice));
  }
};

// Words 16-31 hold 16: the index bit that picks block i + 1's half of a pair table.
inline __m512i high_half_bit() {
  return _mm512_maskz_mov_epi16(__mmask32(0xFFFF0000u), _mm512_set1_epi16(16));
}

// Chunks c and c + 1 of an FP4 row (the 32 bytes at p; a 64-column block) as bf16 in even/odd
// order: `even` holds columns 0, 2, ..., 62 of the block, `odd` columns 1, 3, ..., 63. Each
// byte zero-extended to a word (word i: byte i, columns 2i and 2i + 1), its low nibble (or its
// high one) with bit 4 set in words 16-31 indexes the pair table `tb` (VPERMW): one shuffle
// per 32 columns where e2m1_words takes two.
inline void e2m1_even_odd(const uint8_t* p, __m512i tb, __m512i half, __m512i& even, __m512i& odd) {
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  // (w & 0x0F) | half
  even = _mm512_permutexvar_epi16(_mm512_ternarylogic_epi32(w, _mm512_set1_epi16(0x0F), half, 0xEA),
                                  tb);
  odd = _mm512_permutexvar_epi16(_mm512_or_si512(_mm512_srli_epi16(w, 4), half), tb);
}

// BF16: the row's own values, zero beyond K.
inline __m512i bf16_chunk(const uint16_t* p, int64_t c, int64_t full, int64_t cols) {
  return c < full ? _mm512_loadu_si512(p + c * 32)
                  : _mm512_maskz_loadu_epi16(lanes32(cols - c * 32), p + c * 32);
}

// ---- The GEMV: two streams of rows, decoded in registers -----------------------------------
//
// The FP8 and FP4 GEMVs read two streams of rows (avx512_common::two_streams). Measured on a
// Zen 4 (K = 2048, 0.5-1 GiB of FP8), four adjacent rows per pass (the earlier order) read
// 10.6-12 GB/s on one core and 20-24 on two; one row per pass 17 and ~32 (one run); the two
// streams 21-22 and 25-26. From cache, four rows a pass ran at 29 GB/s a core, two streams run
// at 25 and one row at 19 (its one chain of dependent dot products bounds it), so two streams:
// near the best from memory without one row's loss from cache (FP4: 18 either way). Batch-1
// decode on `medium`: 1.16-1.25x. For rows under a page, software prefetch did not help (longer
// rows: kAheadBytes below).
// y[a] and, when two, y[b] from their accumulators.
inline void store2(__m512 acc0, __m512 acc1, int64_t a, int64_t b, bool two, float* y) {
  y[a] = hsum16(acc0);
  if (two) y[b] = hsum16(acc1);
}

// A band's scale bytes, and whether those of its full chunks all take the direct route (the
// GEMV's fast loop then reads them without a check; a tail chunk goes through chunk()). For
// the fast loop, each full chunk's direct offset as a 32-bit word (the 16-bit offset twice),
// which VPBROADCASTD reads from memory as a plain load. Built from the scale byte in the loop,
// the broadcast from a general register held the GEMV to 25.4 GB/s a core from cache against
// 30.7 so (a Zen 4, 1024 x 2048, `bench matmul`). Bands of more than kMaxChunks full chunks
// (K > 32768) take chunk() throughout.
struct DirectBand {
  static constexpr int64_t kMaxChunks = 1024;
  int64_t band = -1;
  bool direct = false;
  const uint8_t* bytes = nullptr;
  alignas(64) uint32_t offset[kMaxChunks];
  void load(const Fp8Matrix& w, int64_t chunks, int64_t full, int64_t b) {
    band = b;
    bytes = w.scale + b * chunks;
    direct = full <= kMaxChunks;
    for (int64_t c = 0; c < full && direct; ++c) {
      direct = Fp8Decoder::takes_direct(bytes[c]);
      const uint32_t o = Fp8Decoder::direct_offset_bits(bytes[c]);
      offset[c] = o | o << 16;
    }
  }
};

// Rows of at least a page are prefetched into L2 kAheadBytes ahead, a line per line read:
// on their own, rows longer than a page read from memory at about two thirds the rate of
// shorter ones (a Zen 4, one core, 1 GiB of FP8: K = 14336 15.8-16 GB/s, K = 2048 26-27;
// FP4 12.3 and 17), and with the prefetch at the same rate (FP8 25.5-26.2, FP4 16.9). Hints
// T0 or NTA, or distances of a kilobyte, gained little; 4-16 KiB into L2 all did. Shorter rows
// go without: there it cost FP4 5%.
constexpr int64_t kAheadBytes = 8192;
inline bool prefetches_rows(int64_t row_bytes) { return row_bytes >= 4096; }
// Byte `at` + kAheadBytes of the `total` at p into L2, when it lies within them (a pointer
// past them is not formed).
inline void prefetch_l2(const uint8_t* p, int64_t at, int64_t total) {
  if (at + kAheadBytes < total)
    _mm_prefetch(reinterpret_cast<const char*>(p + at + kAheadBytes), _MM_HINT_T1);
}

void gemv_fp8(const Fp8Matrix& w, const uint16_t* xb, float* y, int64_t r0, int64_t r1) {
  const int64_t chunks = (w.cols + 31) / 32, full = w.cols / 32;
  const Fp8Decoder dec{w, chunks, full};
  const bool ahead = prefetches_rows(w.cols);
  const int64_t total = w.rows * w.cols;
  DirectBand band[2];
  two_streams(r0, r1, [&](int64_t a, int64_t b, bool two) {
    const int64_t rows[2] = {a, b};
    for (int r = 0; r < 2; ++r)
      if (rows[r] / 32 != band[r].band) band[r].load(w, chunks, full, rows[r] / 32);
    const uint8_t* wa = dec.row(rows[0]);
    const uint8_t* wb = dec.row(rows[1]);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t c = 0;
    if (band[0].direct && band[1].direct) {
      // Every full chunk by the direct route, its offset broadcast from the band's.
      const uint32_t* oa = band[0].offset;
      const uint32_t* ob = band[1].offset;
      for (; c < full; ++c) {
        if (ahead && (c & 1) == 0) {
          prefetch_l2(w.weight, rows[0] * w.cols + c * 32, total);
          prefetch_l2(w.weight, rows[1] * w.cols + c * 32, total);
        }
        const __m512i xv = _mm512_loadu_si512(xb + c * 32);
        acc0 = dot(
            acc0, xv,
            Fp8Decoder::direct(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wa + c * 32)),
                               band[0].bytes[c], _mm512_set1_epi32(int(oa[c]))));
        acc1 = dot(
            acc1, xv,
            Fp8Decoder::direct(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + c * 32)),
                               band[1].bytes[c], _mm512_set1_epi32(int(ob[c]))));
      }
    }
    for (; c < chunks; ++c) {
      const __m512i xv = _mm512_loadu_si512(xb + c * 32);
      acc0 = dot(acc0, xv, dec.chunk(wa, c, dec.scale(rows[0], c)));
      acc1 = dot(acc1, xv, dec.chunk(wb, c, dec.scale(rows[1], c)));
    }
    store2(acc0, acc1, a, b, two, y);
  });
}

void gemv_fp4(const Fp4Matrix& w, const uint16_t* xb, float* y, int64_t r0, int64_t r1) {
  const int64_t chunks = w.cols / 32, pairs_end = chunks & ~int64_t(1);
  const Fp4Decoder dec{w};
  const bool ahead = prefetches_rows(w.cols / 2);
  const int64_t total = w.rows * (w.cols / 2);
  const __m512i half = high_half_bit();
  two_streams(r0, r1, [&](int64_t a, int64_t b, bool two) {
    const int64_t rows[2] = {a, b};
    const uint8_t* wr[2] = {dec.row(rows[0]), dec.row(rows[1])};
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    Fp4Scales sc[2];
    // 64-column blocks in even/odd order (xb is too: round_x_fp4), then a last lone chunk.
    for (int64_t c = 0; c < pairs_end; c += 2) {
      if ((c & 15) == 0)
        for (int r = 0; r < 2; ++r) dec.block_scales(rows[r], c, sc[r]);
      if (ahead && (c & 3) == 0) {
        prefetch_l2(w.weight, rows[0] * (w.cols / 2) + c * 16, total);
        prefetch_l2(w.weight, rows[1] * (w.cols / 2) + c * 16, total);
      }
      const __m512i xe = _mm512_loadu_si512(xb + c * 32);
      const __m512i xo = _mm512_loadu_si512(xb + c * 32 + 32);
      for (int r = 0; r < 2; ++r) {
        __m512i even, odd;
        e2m1_even_odd(wr[r] + c * 16, Fp4Decoder::pair_table(sc[r], c & 15), half, even, odd);
        acc[r] = dot(dot(acc[r], xe, even), xo, odd);
      }
    }
    if (pairs_end < chunks) {
      const int64_t c = pairs_end;
      if ((c & 15) == 0)
        for (int r = 0; r < 2; ++r) dec.block_scales(rows[r], c, sc[r]);
      const __m512i xv = _mm512_loadu_si512(xb + c * 32);
      for (int r = 0; r < 2; ++r) acc[r] = dot(acc[r], xv, dec.chunk(wr[r], sc[r], c & 15, c));
    }
    store2(acc[0], acc[1], a, b, two, y);
  });
}

// ---- The BF16 GEMV: four rows per pass (it reads at 91% of the machine's bandwidth so) ------

// y[m + r] for r < nr from four rows' accumulators.
inline void store4(const __m512 acc[4], int64_t nr, float* y) {
  _mm_mask_storeu_ps(y, __mmask8(lanes16(nr)), hsum16x4(acc[0], acc[1], acc[2], acc[3]));
}

void gemv_bf16(const Bf16Matrix& w, const uint16_t* xb, float* y, int64_t r0, int64_t r1) {
  const int64_t chunks = (w.cols + 31) / 32, full = w.cols / 32;
  for (int64_t m = r0; m < r1; m += 4) {
    const int64_t nr = min64(4, r1 - m);
    const uint16_t* wr[4];
    for (int r = 0; r < 4; ++r) wr[r] = w.weight + (m + (r < nr ? r : 0)) * w.cols;
    __m512 acc[4];
    for (auto& a : acc) a = _mm512_setzero_ps();
    // A fixed 4 KB ahead, while that stays inside the rows [m, r1) (a pointer past the
    // weights is not formed).
    const int64_t ahead_end = (r1 - m) * w.cols - 2048;
    for (int64_t c = 0; c < chunks; ++c) {
      for (int r = 0; r < 4; ++r)
        if (r * w.cols + c * 32 < ahead_end) prefetch(wr[r] + c * 32 + 2048);
      const __m512i xv = _mm512_loadu_si512(xb + c * 32);
      for (int r = 0; r < 4; ++r) acc[r] = dot(acc[r], xv, bf16_chunk(wr[r], c, full, w.cols));
    }
    store4(acc, nr, y + m);
  }
}

// ---- Batches: a decoded panel of four weight rows times up to six activation rows ----------
//
// The panel is decoded as the block's first group of rows uses it, each chunk two ahead of
// that group's products with it (a filler's fill(c)), the later groups reading it from L1.
// Decoding the whole panel first left its shuffles to run on their own, about 30% of an FP4
// product of six rows (a Zen 4, 1024 x 2048); interleaved with the dot products, which the
// CPU issues on other pipes, they cost a fraction of that.

constexpr int kPanelRows = 4;
constexpr int kGroupRows = 6;

// A filler that decodes nothing: the panel is complete already.
struct NoFill {
  void operator()(int64_t) const {}
};

// y[n, m0 + r] for the panel's nr rows and activation rows [n0, n0 + NN). fill(c) decodes
// chunk c of the panel (and any it decodes with it; nothing past the panel or for a chunk an
// earlier call decoded), kLead chunks ahead of the products: the dot products then find their
// weights decoded, and the CPU overlaps the decode with them (called just before them, it was
// slower than a separate decode: the products waiting on it filled the scheduler).
constexpr int64_t kLead = 2;
template <int NN, class Fill>
void panel_times_rows(const uint16_t* panel, int64_t kpad, int64_t nr, const uint16_t* xb,
                      int64_t n0, float* y, int64_t ystride, int64_t m0, Fill& fill) {
  __m512 acc[kPanelRows][NN];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  const uint16_t* xn = xb + n0 * kpad;
  for (int64_t c = 0; c < kLead; ++c) fill(c);
  for (int64_t k = 0; k < kpad; k += 32) {
    fill(k / 32 + kLead);
    __m512i wv[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) wv[r] = _mm512_loadu_si512(panel + r * kpad + k);
#pragma GCC unroll 6
    for (int n = 0; n < NN; ++n) {
      const __m512i xv = _mm512_loadu_si512(xn + n * kpad + k);
      for (int r = 0; r < kPanelRows; ++r) acc[r][n] = dot(acc[r][n], xv, wv[r]);
    }
  }
  for (int n = 0; n < NN; ++n)
    _mm_mask_storeu_ps(y + (n0 + n) * ystride + m0, __mmask8(lanes16(nr)),
                       hsum16x4(acc[0][n], acc[1][n], acc[2][n], acc[3][n]));
}

// Activation rows per block: as many as keep the block within 768 KiB (most of a Zen 4
// core's 1 MiB L2: against 256 KiB, FP8/FP4 at N = 512 went from 296-374 to 370-393
// GFLOP/s on 2 cores), a multiple of the group, at least one group. The panel is decoded
// once per block.
int64_t block_rows(int64_t kpad) {
  const int64_t fit = (768 * 1024) / (kpad > 0 ? kpad * 2 : 64);
  return fit < kGroupRows ? kGroupRows : fit / kGroupRows * kGroupRows;
}

// For each block of activation rows and each panel of four weight rows [r0, r1): the filler
// make(m, nr, scratch) returns (its `panel`: scratch, or the weights where they already are a
// panel; rows past r1 repeating row m) fills the panel for the block's first group of six
// rows, and the panel is read as it is by the others.
template <class MakeFiller>
void batched(const uint16_t* xb, int64_t batch, int64_t kpad, float* y, int64_t ystride, int64_t r0,
             int64_t r1, uint16_t* scratch, const MakeFiller& make) {
  const int64_t per_block = block_rows(kpad);
  NoFill none;
  for (int64_t b0 = 0; b0 < batch; b0 += per_block) {
    const int64_t b1 = min64(batch, b0 + per_block);
    for (int64_t m = r0; m < r1; m += kPanelRows) {
      const int64_t nr = min64(kPanelRows, r1 - m);
      auto fill = make(m, nr, scratch);
      // The block's rows in as few groups as hold them, of sizes differing by at most one
      // (32 rows: 6, 6, 5, 5, 5, 5, not five sixes and a pair), except that of two groups the
      // first, whose products hide the decode, is a whole six (7 rows: 6 and 1). Measured on
      // a Zen 4 (FP4, 1024 x 2048, one core): 7 rows 145 GFLOP/s so against 130 as 4 and 3;
      // 13 rows 175 as 5, 4 and 4 against 170 as 6, 6 and 1; 32 rows 199 against 193.
      const int64_t rows = b1 - b0, groups = (rows + kGroupRows - 1) / kGroupRows;
      const int64_t base = rows / groups, larger = rows % groups;
      for (int64_t g = 0, n = b0; g < groups; ++g) {
        const int64_t count =
            groups == 2 ? (g == 0 ? kGroupRows : rows - kGroupRows) : base + (g < larger ? 1 : 0);
        with_count<kGroupRows>(count, [&]<int NN>() {
          if (g == 0)
            panel_times_rows<NN>(fill.panel, kpad, nr, xb, n, y, ystride, m, fill);
          else
            panel_times_rows<NN>(fill.panel, kpad, nr, xb, n, y, ystride, m, none);
        });
        n += count;
      }
    }
  }
}

// Fills the panel of FP8 rows [m, m + 4) (rows past m + nr repeat row m) a chunk at a time,
// prefetching the four rows after it, up to row `end` - 1, when `end` >= 0.
struct Fp8PanelFill {
  const Fp8Decoder dec;
  uint16_t* panel;
  int64_t m, kpad;
  const uint8_t* rows[kPanelRows];
  const uint8_t* ahead[kPanelRows];
  Fp8PanelFill(const Fp8Matrix& w, int64_t m_, int64_t nr, int64_t end, uint16_t* scratch)
      : dec{w, (w.cols + 31) / 32, w.cols / 32}, panel(scratch), m(m_), kpad(dec.chunks * 32) {
    for (int r = 0; r < kPanelRows; ++r) {
      rows[r] = dec.row(m + (r < nr ? r : 0));
      ahead[r] = end >= 0 ? dec.row(min64(m + kPanelRows + r, end - 1)) : nullptr;
    }
  }
  void operator()(int64_t c) {
    if (c >= dec.chunks) return;
    if (ahead[0] != nullptr && (c & 1) == 0)
      for (int r = 0; r < kPanelRows; ++r) prefetch(ahead[r] + c * 32);
    const Fp8Scale sv = dec.scale(m, c);
    for (int r = 0; r < kPanelRows; ++r)
      _mm512_store_si512(panel + r * kpad + c * 32, dec.chunk(rows[r], c, sv));
  }
};

// A BF16 panel: four whole rows of K a multiple of 32 as they lie; otherwise rows copied into
// scratch, zero beyond their columns (rows past m + nr repeat row m), prefetching the panel
// after it.
struct Bf16Panel {
  const uint16_t* panel;
  Bf16Panel(const Bf16Matrix& w, int64_t m, int64_t nr, int64_t r1, uint16_t* scratch) {
    const int64_t kpad = padded_cols(w.cols), chunks = kpad / 32, full = w.cols / 32;
    if (nr == kPanelRows && kpad == w.cols) {
      panel = w.weight + m * w.cols;
      return;
    }
    for (int r = 0; r < kPanelRows; ++r) {
      const int64_t row = m + (r < nr ? r : 0);
      const int64_t next = m + kPanelRows < r1 ? min64(row + kPanelRows, r1 - 1) : row;
      const uint16_t* __restrict p = w.weight + row * w.cols;
      const uint16_t* ahead = w.weight + next * w.cols;
      uint16_t* __restrict out = scratch + r * kpad;
      for (int64_t c = 0; c < chunks; ++c) {
        prefetch(ahead + c * 32);
        _mm512_store_si512(out + c * 32, bf16_chunk(p, c, full, w.cols));
      }
    }
    panel = scratch;
  }
  void operator()(int64_t) const {}
};

// Fills the panel of FP4 rows [m, m + 4) (rows past m + nr repeat row m) in the GEMV's order
// (even/odd 64-column blocks, then a lone last chunk): a whole block at its first chunk,
// prefetching row + 4 (up to `end` - 1) when `end` >= 0.
struct Fp4PanelFill {
  const Fp4Decoder dec;
  uint16_t* panel;
  int64_t kpad, chunks, pairs_end;
  int64_t row[kPanelRows], next[kPanelRows];
  const uint8_t* rows[kPanelRows];
  const uint8_t* ahead[kPanelRows];
  __m512i half;
  Fp4Scales sc[kPanelRows];
  Fp4PanelFill(const Fp4Matrix& w, int64_t m, int64_t nr, int64_t end, uint16_t* scratch)
      : dec{w},
        panel(scratch),
        kpad(w.cols),
        chunks(w.cols / 32),
        pairs_end(chunks & ~int64_t(1)),
        half(high_half_bit()) {
    for (int r = 0; r < kPanelRows; ++r) {
      row[r] = m + (r < nr ? r : 0);
      next[r] = end >= 0 ? min64(row[r] + kPanelRows, end - 1) : row[r];
      rows[r] = dec.row(row[r]);
      ahead[r] = end >= 0 ? dec.row(next[r]) : nullptr;
    }
  }
  void operator()(int64_t c) {
    if (c >= chunks || ((c & 1) != 0 && c < pairs_end)) return;  // odd: decoded with c - 1
    if ((c & 15) == 0)
      for (int r = 0; r < kPanelRows; ++r) {
        dec.block_scales(row[r], c, sc[r]);
        if (ahead[r] != nullptr && (c & 63) == 0)  // a line holds 64 scales
          prefetch(dec.w.scale + next[r] * chunks + c);
      }
    if (ahead[0] != nullptr && (c & 3) == 0)
      for (int r = 0; r < kPanelRows; ++r) prefetch(ahead[r] + c * 16);
    if (c < pairs_end) {
      for (int r = 0; r < kPanelRows; ++r) {
        __m512i even, odd;
        e2m1_even_odd(rows[r] + c * 16, Fp4Decoder::pair_table(sc[r], c & 15), half, even, odd);
        _mm512_store_si512(panel + r * kpad + c * 32, even);
        _mm512_store_si512(panel + r * kpad + c * 32 + 32, odd);
      }
    } else {
      for (int r = 0; r < kPanelRows; ++r)
        _mm512_store_si512(panel + r * kpad + c * 32, dec.chunk(rows[r], sc[r], c & 15, c));
    }
  }
};

}  // namespace

void round_x(const float* x, int64_t batch, int64_t cols, uint16_t* xb) {
  const int64_t kpad = padded_cols(cols);
  for (int64_t n = 0; n < batch; ++n) {
    const float* xr = x + n * cols;
    uint16_t* out = xb + n * kpad;
    for (int64_t k = 0; k < kpad; k += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(lanes16(cols - k), xr + k);
      const __m512 hi = _mm512_maskz_loadu_ps(lanes16(cols - k - 16), xr + k + 16);
      _mm512_storeu_si512(out + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

void round_x_fp4(const float* x, int64_t batch, int64_t cols, uint16_t* xb) {
  round_x(x, batch, cols, xb);
  // Words 0-31 of each 64-column block: its even columns; 32-63: its odd ones.
  alignas(64) static constexpr uint16_t kEven[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20,
                                                     22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42,
                                                     44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
  const __m512i even = _mm512_load_si512(kEven);
  const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(1));
  const int64_t kpad = padded_cols(cols);
  for (int64_t n = 0; n < batch; ++n) {
    uint16_t* row = xb + n * kpad;
    for (int64_t k = 0; k + 64 <= cols; k += 64) {
      const __m512i a = _mm512_loadu_si512(row + k), b = _mm512_loadu_si512(row + k + 32);
      _mm512_storeu_si512(row + k, _mm512_permutex2var_epi16(a, even, b));
      _mm512_storeu_si512(row + k + 32, _mm512_permutex2var_epi16(a, odd, b));
    }
  }
}

void fp8_rows(const Fp8Matrix& w, const uint16_t* xb, int64_t batch, float* y, int64_t r0,
              int64_t r1, void* scratch) {
  if (batch == 1) return gemv_fp8(w, xb, y, r0, r1);
  batched(xb, batch, padded_cols(w.cols), y, w.rows, r0, r1, static_cast<uint16_t*>(scratch),
          [&](int64_t m, int64_t nr, uint16_t* panel) {
            return Fp8PanelFill(w, m, nr, m + kPanelRows < r1 ? r1 : -1, panel);
          });
}

void fp4_rows(const Fp4Matrix& w, const uint16_t* xb, int64_t batch, float* y, int64_t r0,
              int64_t r1, void* scratch) {
  if (batch == 1) return gemv_fp4(w, xb, y, r0, r1);
  batched(xb, batch, w.cols, y, w.rows, r0, r1, static_cast<uint16_t*>(scratch),
          [&](int64_t m, int64_t nr, uint16_t* panel) {
            return Fp4PanelFill(w, m, nr, m + kPanelRows < r1 ? r1 : -1, panel);
          });
}

void bf16_rows(const Bf16Matrix& w, const uint16_t* xb, int64_t batch, float* y, int64_t r0,
               int64_t r1, void* scratch) {
  if (batch == 1) return gemv_bf16(w, xb, y, r0, r1);
  batched(xb, batch, padded_cols(w.cols), y, w.rows, r0, r1, static_cast<uint16_t*>(scratch),
          [&](int64_t m, int64_t nr, uint16_t* panel) { return Bf16Panel(w, m, nr, r1, panel); });
}

}  // namespace fathom::kernels::cpu::avx512bf16
