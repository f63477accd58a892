// AMX BF16 products for FP8, FP4 and BF16 weights (see gemm_amx.h for the contract).
//
// Tiles: C in tmm0..3 (two weight tiles x up to two activation tiles), A (weights) in
// tmm4/5, B (activations) in tmm6/7, all 16 rows x 64 bytes. Two loop orders, chosen by the
// batch; a C element is the same chain of TDPBF16PS over K in ascending steps in both
// (storing and reloading C changes no value), so they give the same bits:
// - up to 32 activation rows (decode): each pair of weight tiles streams over K, a step
//   decoded while the previous steps' products run, C staying in its tiles;
// - larger batches (prefill): the weight tiles of a panel (four 16-row tiles) are decoded
//   kPanelSteps steps at a time and every pair of activation tiles runs over them, C kept in
//   a per-thread buffer between blocks.
// Per-row scales are prepared for a chunk of kSteps steps at a time.
//
// Decoding is exact: a weight times its power-of-two scale is one bf16 value, built from
// the code's bits:
// - E4M3 (one scale per tile, as a 32x32 block covers it): the 7 magnitude bits shifted
//   into bf16 position and the exponent re-biased by (scale - 7), subnormal codes looked up
//   in an 8-entry table of their scaled values, the sign or-ed back;
// - E2M1 (one scale per row and step): codes looked up as signed bf16 (vpermw), the
//   exponent lowered by (127 - scale) with unsigned saturation: a zero stays zero, and a
//   value whose scaled exponent would drop below the normal range becomes a bf16 subnormal
//   or zero, which the tiles read as zero anyway (TDPBF16PS treats subnormal inputs as
//   zero). -0 decodes to +0.
// Scales outside the ranges these cover (a scale above 1 or the smallest one for E2M1, an
// extreme one for E4M3) take a scalar path with the same values.
//
// Compiled with -mamx-tile -mamx-bf16 -mavx512f/bw/vl/bf16/vbmi: this file includes only
// gemm_amx.h and amx_common.h and defines nothing with linkage the baseline files could share.
#include "kernels/cpu/gemm_amx.h"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/amx_common.h"

namespace fathom::kernels::cpu::amx {
namespace {

constexpr int64_t kPanelTiles = 4;                 // 16-row weight tiles decoded together (prefill)
constexpr int64_t kSteps = 16;                     // 32-column steps per chunk / decoded block
constexpr int64_t kBlockTiles = 16;                // 16-row activation tiles per output block
constexpr int64_t kPrefetchPairBytes = 128 << 10;  // the largest next pair prefetched
constexpr int64_t kPanelSteps = 64;  // 32-column steps of a decoded panel block (prefill)
constexpr int64_t kABytes = kPanelTiles * kPanelSteps * kTileWords * 2;
constexpr int64_t kCBytes = kPanelTiles * (kBlockTiles + 1) * kTileFloats * 4;

FATHOM_INLINE __mmask32 lanes32(int64_t n) {
  return n >= 32 ? __mmask32(0xFFFFFFFFu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

// The LDTILECFG operand: palette 1, tiles 0..7 16 rows x colsb bytes. Loaded from constants,
// not a local filled before the load: GCC 12's _tile_loadconfig declares its asm operand as
// one pointer (8 bytes), so the compiler may drop the stores to the rest of a local config
// (then every tile has zero rows and the first tile instruction faults).
struct alignas(64) TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
constexpr TileConfig tile_config(int64_t columns) {
  const uint16_t c = uint16_t(4 * columns);
  return {1, 0, {}, {c, c, c, c, 64, 64, c, c}, {16, 16, 16, 16, 16, 16, 16, 16}};
}
// kTileConfigs[c]: C and B tiles of c columns (16: every tile 16 x 64 bytes).
alignas(64) constexpr TileConfig kTileConfigs[17] = {
    tile_config(16), tile_config(1),  tile_config(2),  tile_config(3),  tile_config(4),
    tile_config(5),  tile_config(6),  tile_config(7),  tile_config(8),  tile_config(9),
    tile_config(10), tile_config(11), tile_config(12), tile_config(13), tile_config(14),
    tile_config(15), tile_config(16)};

thread_local int64_t configured_columns = 0;  // 0: not configured

alignas(64) const uint16_t kZeroTile[kTileWords] = {};

float bits_float(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}

// Round to nearest even; NaN stays NaN.
uint16_t bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

// The scalar decodes of the slow paths (exact: the definitions in kernels/quant.h).
float e8m0_value(uint8_t b) {
  return bits_float(b == 0 ? 0x00400000u : b == 0xFF ? 0x7FC00000u : uint32_t(b) << 23);
}
float e4m3_value(uint8_t b) {
  const int exp = (b >> 3) & 0xF, man = b & 7;
  float v;
  if (exp == 0xF && man == 7) {
    v = bits_float(0x7FC00000u);
  } else if (exp == 0) {
    v = float(man) * 0x1p-9f;
  } else {
    v = bits_float(uint32_t(exp + 120) << 23) * (1.0f + float(man) / 8.0f);
  }
  return (b & 0x80) ? -v : v;
}
float e2m1_value(uint8_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMag[code & 7];
  return (code & 8) ? -v : v;
}

FATHOM_INLINE void zero_rows(uint16_t* dst, int64_t rows) {
  for (int64_t r = rows; r < 16; ++r) _mm512_store_si512(dst + r * 32, _mm512_setzero_si512());
}

// ---- Weight sources ---------------------------------------------------------------------
//
// A source gives the 16 x 32 tile at rows m0.. (`rows` of them inside the matrix) and step
// kt in bf16 (rows past the matrix and columns past K zero). chunk() prepares that tile row
// for steps [kt0, kt0 + steps); tile() then gives step kt = kt0 + s, decoded into `slot`
// or in place.

struct ATile {
  const void* p;
  int64_t stride;
};

// Extreme E4M3 scales: the scalar decode.
void fp8_tile_slow(const uint8_t* src, int64_t K, int64_t rows, int64_t cols, uint8_t sc,
                   uint16_t* dst) {
  const float sv = e8m0_value(sc);
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 0; c < 32; ++c)
      dst[r * 32 + c] = r < rows && c < cols ? bf16_bits(e4m3_value(src[r * K + c]) * sv) : 0;
}

struct Fp8Source {
  const Fp8Matrix& w;
  static constexpr bool kPrefetchLongRows = true;
  struct Chunk {};
  const void* row_base(int64_t m) const { return w.weight + m * w.cols; }
  int64_t row_bytes() const { return w.cols; }
  FATHOM_INLINE void chunk(int64_t, int64_t, int64_t, int64_t, Chunk&) const {}

  static bool plain(const Chunk&) { return true; }
  template <bool Full>
  FATHOM_INLINE ATile tile(int64_t m0, int64_t rows, int64_t kt, int64_t, const Chunk&,
                           uint16_t* slot) const {
    const int64_t K = w.cols, kts = (K + 31) / 32, kc = kt * 32;
    const uint8_t sc = w.scale[(m0 / 32) * kts + kt];
    const uint8_t* src = w.weight + m0 * K + kc;
    if (sc < 10 || sc > 246) [[unlikely]] {
      fp8_tile_slow(src, K, rows, min64(32, K - kc), sc, slot);
      return {slot, 64};
    }
    // E4M3 subnormals m * 2^-9 as bf16, the scale added to their exponent.
    alignas(64) static const uint16_t kSub[32] = {0,      0x3B00, 0x3B80, 0x3BC0,
                                                  0x3C00, 0x3C20, 0x3C40, 0x3C60};
    const __m512i sub0 = _mm512_load_si512(kSub);
    const __m512i subv =
        _mm512_mask_add_epi16(sub0, 0xFE, sub0, _mm512_set1_epi16(short((int(sc) - 127) << 7)));
    const __m512i rebias = _mm512_set1_epi16(short((int(sc) - 7) << 7));
    const __m512i mag_mask = _mm512_set1_epi16(0x07F0), exp_bits = _mm512_set1_epi16(0x78),
                  sign = _mm512_set1_epi16(short(0x8000));
    const __mmask32 cols = lanes32(K - kc);
#pragma GCC unroll 16
    for (int64_t r = 0; r < (Full ? 16 : rows); ++r) {
      const __m512i b = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(cols, src + r * K));
      __m512i t = _mm512_and_si512(_mm512_slli_epi16(b, 4), mag_mask);
      const __mmask32 normal = _mm512_test_epi16_mask(b, exp_bits);
      t = _mm512_mask_add_epi16(t, normal, t, rebias);
      t = _mm512_mask_permutexvar_epi16(t, __mmask32(~normal), b, subv);
      _mm512_store_si512(slot + r * 32, _mm512_ternarylogic_epi32(t, b, sign, 0xF8));
    }
    if (rows < 16) zero_rows(slot, rows);
    return {slot, 64};
  }
};

// E2M1 rows whose scale is above 1, or the smallest one (a nonzero magnitude could fall
// below the exponent drop): the scalar decode.
void fp4_row_slow(const uint8_t* src, uint8_t sc, uint16_t* dst) {
  const float sv = e8m0_value(sc);
  for (int64_t c = 0; c < 32; ++c) {
    const uint8_t byte = src[c / 2];
    dst[c] = bf16_bits(e2m1_value((c & 1) ? byte >> 4 : byte & 15) * sv);
  }
}

struct Fp4Source {
  const Fp4Matrix& w;
  static constexpr bool kPrefetchLongRows = false;
  const void* row_base(int64_t m) const { return w.weight + m * (w.cols / 2); }
  int64_t row_bytes() const { return w.cols / 2; }
  // Per row and step of the chunk, the exponent drop (127 - scale) << 7 as a pair of words,
  // and whether any scale of the chunk needs the scalar decode.
  struct Chunk {
    alignas(64) uint32_t drop[16][kSteps];
    bool odd;
  };

  FATHOM_INLINE void chunk(int64_t m0, int64_t rows, int64_t kt0, int64_t steps, Chunk& c) const {
    const int64_t row_scales = w.cols / 32;
    const __mmask16 lanes = lanes16(steps);
    const __m512i one = _mm512_set1_epi32(1), top = _mm512_set1_epi32(127);
    __mmask16 odd = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const __m512i sv =
          _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, w.scale + (m0 + r) * row_scales + kt0));
      odd |= _mm512_mask_cmplt_epi32_mask(lanes, sv, one) |
             _mm512_mask_cmpgt_epi32_mask(lanes, sv, top);
      _mm512_store_si512(
          c.drop[r], _mm512_mullo_epi32(_mm512_sub_epi32(top, sv), _mm512_set1_epi32(0x00800080)));
    }
    c.odd = odd != 0;
  }

  static bool plain(const Chunk& c) { return !c.odd; }
  template <bool Full>
  FATHOM_INLINE ATile tile(int64_t m0, int64_t rows, int64_t kt, int64_t s, const Chunk& c,
                           uint16_t* slot) const {
    // Word 2j and 2j+1 take byte j (vpermb, odd bytes zeroed); the odd word is shifted down
    // to the high nibble.
    alignas(64) static const uint8_t kDup[64] = {
        0,  0,  0,  0,  1,  1,  1,  1,  2,  2,  2,  2,  3,  3,  3,  3,  4,  4,  4,  4,  5,  5,
        5,  5,  6,  6,  6,  6,  7,  7,  7,  7,  8,  8,  8,  8,  9,  9,  9,  9,  10, 10, 10, 10,
        11, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15};
    // E2M1 codes as signed bf16, indexed by the low five bits (so repeated every 16); -0 is
    // +0, so that lowering the exponent by unsigned saturation leaves every zero zero.
    alignas(64) static const uint16_t kCode[32] = {
        0,      0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0, 0,      0xBF00, 0xBF80,
        0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0, 0,      0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040,
        0x4080, 0x40C0, 0,      0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
    const __m512i dup = _mm512_load_si512(kDup), code = _mm512_load_si512(kCode),
                  shifts = _mm512_set1_epi32(4 << 16);
    const int64_t row_bytes = w.cols / 2;
    const uint8_t* src = w.weight + m0 * row_bytes + kt * 16;
    if (Full) {
      const __mmask64 even = 0x5555555555555555ull;
#pragma GCC unroll 16
      for (int64_t r = 0; r < 16; ++r) {
        __m512i b = _mm512_castsi128_si512(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + r * row_bytes)));
        b = _mm512_srlv_epi16(_mm512_maskz_permutexvar_epi8(even, dup, b), shifts);
        const __m512i v = _mm512_permutexvar_epi16(b, code);
        _mm512_store_si512(slot + r * 32,
                           _mm512_subs_epu16(v, _mm512_set1_epi32(int(c.drop[r][s]))));
      }
      return {slot, 64};
    }
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* p = src + r * row_bytes;
      if (c.odd) {
        const uint8_t sc = w.scale[(m0 + r) * (w.cols / 32) + kt];
        if (sc < 1 || sc > 127) {
          fp4_row_slow(p, sc, slot + r * 32);
          continue;
        }
      }
      __m512i b = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      b = _mm512_srlv_epi16(_mm512_maskz_permutexvar_epi8(0x5555555555555555ull, dup, b), shifts);
      const __m512i v = _mm512_permutexvar_epi16(b, code);
      _mm512_store_si512(slot + r * 32, _mm512_subs_epu16(v, _mm512_set1_epi32(int(c.drop[r][s]))));
    }
    if (rows < 16) zero_rows(slot, rows);
    return {slot, 64};
  }
};

struct Bf16Source {
  const Bf16Matrix& w;
  static constexpr bool kPrefetchLongRows = true;
  struct Chunk {};
  const void* row_base(int64_t m) const { return w.weight + m * w.cols; }
  int64_t row_bytes() const { return w.cols * 2; }
  FATHOM_INLINE void chunk(int64_t, int64_t, int64_t, int64_t, Chunk&) const {}

  static bool plain(const Chunk&) { return true; }
  template <bool Full>
  FATHOM_INLINE ATile tile(int64_t m0, int64_t rows, int64_t kt, int64_t, const Chunk&,
                           uint16_t* slot) const {
    const int64_t K = w.cols, k0 = kt * 32;
    const uint16_t* src = w.weight + m0 * K + k0;
    if (rows == 16 && k0 + 32 <= K) return {src, K * 2};
    // A tile that reaches past the matrix: copied with zeros.
    const __mmask32 cols = lanes32(K - k0);
    for (int64_t r = 0; r < rows; ++r)
      _mm512_store_si512(slot + r * 32, _mm512_maskz_loadu_epi16(cols, src + r * K));
    zero_rows(slot, rows);
    return {slot, 64};
  }
};

// ---- The tile loops ---------------------------------------------------------------------

// One C tile [16 weight rows][16 activation rows] into y [batch, M].
void write_tile(const float* c, float* y, int64_t M, int64_t m0, int64_t n0, int64_t batch) {
  const __mmask16 rows = lanes16(M - m0);
  const __m512i idx =
      _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
  const int64_t cols = min64(16, batch - n0);
  for (int64_t n = 0; n < cols; ++n)
    _mm512_mask_storeu_ps(y + (n0 + n) * M + m0, rows, _mm512_i32gather_ps(idx, c + n, 4));
}

// The activation tiles of the stream: step kt's first tile at base + kt * step_words, its
// second (NT == 2) at second + kt * step_words, rows `stride` bytes apart.
struct BTiles {
  const uint16_t* base;
  const uint16_t* second;
  int64_t step_words, stride;
  const uint16_t* first_at(int64_t kt) const { return base + kt * step_words; }
  const uint16_t* second_at(int64_t kt) const { return second + kt * step_words; }
};

// C += A · B for one step of the stream: weight tiles a0, a1 (a1 null: none) against the
// step's one or two activation tiles.
template <int NT>
FATHOM_INLINE void stream_step(ATile a0, const ATile* a1, const BTiles& b, int64_t kt) {
  _tile_loadd(4, a0.p, a0.stride);
  _tile_loadd(6, b.first_at(kt), b.stride);
  _tile_dpbf16ps(0, 4, 6);
  if (NT == 2) {
    _tile_loadd(7, b.second_at(kt), b.stride);
    _tile_dpbf16ps(2, 4, 7);
  }
  if (a1 != nullptr) {
    _tile_loadd(5, a1->p, a1->stride);
    _tile_dpbf16ps(1, 5, 6);
    if (NT == 2) _tile_dpbf16ps(3, 5, 7);
  }
}

// Long rows from memory: each of the 16 rows' next line kRowsAheadLines lines past step kt,
// when step kt starts a line. The hardware follows 16 streams, but not far enough ahead for
// FP8 and BF16 rows (measured on a 1 GB FP8 GEMV: 0.49 -> 0.70 of the machine's read
// bandwidth; no gain for FP4, and about 10% lost on FP8 weights already in the L3).
constexpr int64_t kRowsAheadLines = 4;

// step_bytes: a row's bytes per step (row_bytes / kts, computed once per call).
template <typename Source>
FATHOM_INLINE void prefetch_rows_ahead(const Source& src, int64_t m0, int64_t kt,
                                       int64_t step_bytes) {
  const int64_t off = kt * step_bytes + kRowsAheadLines * 64;
  if (off >= src.row_bytes() || off / 64 == (off - step_bytes) / 64) return;
  for (int64_t r = 0; r < 16; ++r)
    prefetch_l2(static_cast<const char*>(src.row_base(m0 + r)) + off);
}

// Up to two activation tiles: each pair of weight tiles (or each tile, for long rows) streams
// over K, C staying in its tiles. Whole tiles whose chunk needs no scalar decode take the
// unrolled path, where a step is decoded kLag steps ahead of its products into a ring of
// kRing slots: a tile load right after the stores that wrote its slot waits for them to
// reach the cache (about 3x the cost of the product), so the stores are given time to land
// while earlier steps' products run.
constexpr int64_t kLag = 2, kRing = 4;

template <int NT, typename Source>
void stream_rows(const Source& src, int64_t M, int64_t K, const BTiles& b, int64_t batch, float* y,
                 int64_t r0, int64_t r1, uint16_t* abuf, float* cbuf) {
  const int64_t kts = (K + 31) / 32;
  typename Source::Chunk c0, c1;
  // Long rows (large K) are streams the hardware prefetcher follows, as long as there are not
  // too many at once: one tile (16 rows) at a time. Short rows come in pairs of tiles (the
  // activation tiles loaded once for both), the next pair's rows (contiguous) prefetched into
  // L2 a few lines a step, as a short row is too short a stream for the hardware.
  const bool long_rows = 32 * src.row_bytes() > kPrefetchPairBytes;
  const int64_t group = long_rows ? 16 : 32, step_bytes = src.row_bytes() / kts;
  ATile ring0[kRing], ring1[kRing];
  for (int64_t m0 = r0; m0 < r1; m0 += group) {
    const int64_t rows0 = min64(16, M - m0),
                  rows1 = long_rows ? 0 : min64(16, min64(r1, M) - m0 - 16);
    const int64_t next_rows = long_rows ? 0 : min64(32, r1 - m0 - 32);
    const char* next = next_rows > 0 ? static_cast<const char*>(src.row_base(m0 + 32)) : nullptr;
    const int64_t next_lines = next_rows > 0 ? (next_rows * src.row_bytes() + 63) / 64 : 0;
    const int64_t per_step = (next_lines + kts - 1) / kts;
    auto prefetch_next = [&](int64_t kt) {
      for (int64_t i = kt * per_step; i < min64(next_lines, (kt + 1) * per_step); ++i)
        prefetch_l2(next + i * 64);
    };
    _tile_zero(0);
    _tile_zero(1);
    if (NT == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int64_t kt0 = 0; kt0 < kts; kt0 += kSteps) {
      const int64_t steps = min64(kSteps, kts - kt0);
      src.chunk(m0, rows0, kt0, steps, c0);
      if (rows1 > 0) src.chunk(m0 + 16, rows1, kt0, steps, c1);
      const bool pair = rows1 == 16 && Source::plain(c0) && Source::plain(c1);
      if (pair || (rows1 <= 0 && rows0 == 16 && Source::plain(c0))) {
        auto decode = [&](int64_t s) {
          uint16_t* slot = abuf + (s % kRing) * 2 * kTileWords;
          ring0[s % kRing] = src.template tile<true>(m0, 16, kt0 + s, s, c0, slot);
          if (pair)
            ring1[s % kRing] =
                src.template tile<true>(m0 + 16, 16, kt0 + s, s, c1, slot + kTileWords);
        };
        for (int64_t s = 0; s < min64(kLag, steps); ++s) decode(s);
        for (int64_t s = 0; s < steps; ++s) {
          if (s + kLag < steps) decode(s + kLag);
          if (pair) {
            prefetch_next(kt0 + s);
            stream_step<NT>(ring0[s % kRing], &ring1[s % kRing], b, kt0 + s);
          } else {
            if (Source::kPrefetchLongRows && long_rows)
              prefetch_rows_ahead(src, m0, kt0 + s, step_bytes);
            stream_step<NT>(ring0[s % kRing], nullptr, b, kt0 + s);
          }
        }
        continue;
      }
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t kt = kt0 + s;
        prefetch_next(kt);
        uint16_t* slot = abuf + (s & 1) * 2 * kTileWords;
        const ATile a0 = src.template tile<false>(m0, rows0, kt, s, c0, slot);
        if (rows1 > 0) {
          const ATile a1 = src.template tile<false>(m0 + 16, rows1, kt, s, c1, slot + kTileWords);
          stream_step<NT>(a0, &a1, b, kt);
        } else {
          stream_step<NT>(a0, nullptr, b, kt);
        }
      }
    }
    // C rows are stored 64 bytes apart whatever the tiles' columns.
    _tile_stored(0, cbuf, 64);
    _tile_stored(1, cbuf + kTileFloats, 64);
    if (NT == 2) {
      _tile_stored(2, cbuf + 2 * kTileFloats, 64);
      _tile_stored(3, cbuf + 3 * kTileFloats, 64);
    }
    for (int64_t i = 0; i < (rows1 > 0 ? 2 : 1); ++i)
      for (int64_t nt = 0; nt < NT; ++nt)
        write_tile(cbuf + (nt * 2 + i) * kTileFloats, y, M, m0 + 16 * i, nt * 16, batch);
  }
}

// C (two weight tiles x NT activation tiles) += A · B over `steps` steps. c[0..3]: the C
// tiles (m0,n0), (m1,n0), (m0,n1), (m1,n1) in memory; `fresh` starts them at zero.
template <int NT>
void tile_block(const ATile* a0, const ATile* a1, const uint16_t* b0, const uint16_t* b1,
                int64_t steps, float* const c[4], bool fresh) {
  if (fresh) {
    _tile_zero(0);
    _tile_zero(1);
    if (NT == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, c[0], 64);
    _tile_loadd(1, c[1], 64);
    if (NT == 2) {
      _tile_loadd(2, c[2], 64);
      _tile_loadd(3, c[3], 64);
    }
  }
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, a0[s].p, a0[s].stride);
    _tile_loadd(5, a1[s].p, a1[s].stride);
    _tile_loadd(6, b0 + s * kTileWords, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 5, 6);
    if (NT == 2) {
      _tile_loadd(7, b1 + s * kTileWords, 64);
      _tile_dpbf16ps(2, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  if (NT == 2) {
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
  }
}

// Larger batches: panels of four weight tiles decoded kPanelSteps steps at a time (long
// blocks: each block of C tiles ends by waiting for its last products), every pair of
// activation tiles run over them.
template <typename Source>
void panel_rows(const Source& src, int64_t M, int64_t K, const uint16_t* xp, int64_t batch,
                float* y, int64_t r0, int64_t r1, uint16_t* abuf, float* cbuf) {
  const int64_t kts = (K + 31) / 32, nts = (batch + 15) / 16;
  auto cslot = [&](int64_t mt, int64_t nt) { return cbuf + (mt * kBlockTiles + nt) * kTileFloats; };
  ATile a[kPanelTiles][kPanelSteps];
  typename Source::Chunk chunk;
  for (int64_t p0 = r0; p0 < r1; p0 += 16 * kPanelTiles) {
    const int64_t pt = min64(kPanelTiles, (r1 - p0 + 15) / 16);
    for (int64_t nb = 0; nb < nts; nb += kBlockTiles) {
      const int64_t nbt = min64(kBlockTiles, nts - nb);
      for (int64_t k0 = 0; k0 < kts; k0 += kPanelSteps) {
        const int64_t steps = min64(kPanelSteps, kts - k0);
        for (int64_t mt = 0; mt < kPanelTiles; ++mt) {
          if (mt >= pt) {
            for (int64_t s = 0; s < steps; ++s) a[mt][s] = {kZeroTile, 64};
            continue;
          }
          const int64_t m0 = p0 + 16 * mt, rows = min64(16, M - m0);
          // Scales are prepared kSteps steps at a time.
          for (int64_t c0 = 0; c0 < steps; c0 += kSteps) {
            const int64_t cs = min64(kSteps, steps - c0);
            src.chunk(m0, rows, k0 + c0, cs, chunk);
            for (int64_t s = c0; s < c0 + cs; ++s) {
              uint16_t* slot = abuf + (mt * kPanelSteps + s) * kTileWords;
              a[mt][s] = rows == 16 && Source::plain(chunk)
                             ? src.template tile<true>(m0, 16, k0 + s, s - c0, chunk, slot)
                             : src.template tile<false>(m0, rows, k0 + s, s - c0, chunk, slot);
            }
          }
        }
        for (int64_t nt = 0; nt < nbt; nt += 2) {
          const uint16_t* b0 = xp + ((nb + nt) * kts + k0) * kTileWords;
          const uint16_t* b1 = b0 + kts * kTileWords;
          for (int64_t mt = 0; mt < pt; mt += 2) {
            float* const c[4] = {cslot(mt, nt), cslot(mt + 1, nt), cslot(mt, nt + 1),
                                 cslot(mt + 1, nt + 1)};
            if (nbt - nt >= 2)
              tile_block<2>(a[mt], a[mt + 1], b0, b1, steps, c, k0 == 0);
            else
              tile_block<1>(a[mt], a[mt + 1], b0, b1, steps, c, k0 == 0);
          }
        }
      }
      for (int64_t mt = 0; mt < pt; ++mt)
        for (int64_t nt = 0; nt < nbt; ++nt)
          write_tile(cslot(mt, nt), y, M, p0 + 16 * mt, (nb + nt) * 16, batch);
    }
  }
}

template <typename Source>
void run_rows(const Source& src, int64_t M, int64_t K, const uint16_t* xp, int64_t batch, float* y,
              int64_t r0, int64_t r1, void* scratch) {
  uint16_t* abuf = static_cast<uint16_t*>(scratch);
  float* cbuf = reinterpret_cast<float*>(static_cast<char*>(scratch) + kABytes);
  const int64_t kts = (K + 31) / 32;
  if (batch <= 16) {
    configure_narrow_tiles(batch);
    stream_rows<1>(src, M, K, BTiles{xp, xp, 32 * batch, 4 * batch}, batch, y, r0, r1, abuf, cbuf);
    return;
  }
  ensure_tiles();
  if (batch <= 32)
    stream_rows<2>(src, M, K, BTiles{xp, xp + kts * kTileWords, kTileWords, 64}, batch, y, r0, r1,
                   abuf, cbuf);
  else
    panel_rows(src, M, K, xp, batch, y, r0, r1, abuf, cbuf);
}

}  // namespace

void configure_narrow_tiles(int64_t columns) {
  if (configured_columns == columns) return;
  _tile_loadconfig(&kTileConfigs[columns]);
  configured_columns = columns;
}

void ensure_tiles() { configure_narrow_tiles(16); }

void pack_x(const float* x, int64_t batch, int64_t cols, uint16_t* out) {
  pack_x_tiles(x, batch, cols, out, 0, (batch + 15) / 16);
}

void pack_x_tiles(const float* x, int64_t batch, int64_t cols, uint16_t* out, int64_t nt0,
                  int64_t nt1) {
  const int64_t kts = (cols + 31) / 32;
  for (int64_t nt = nt0; nt < nt1; ++nt) {
    const int64_t rows = min64(16, batch - nt * 16);
    for (int64_t kt = 0; kt < kts; ++kt) {
      // Row i of 16 activation rows: its 32 columns as 16 bf16 pairs (dword j: columns 2j,
      // 2j+1); transposed, tile row j holds pair j of every activation row.
      const int64_t k0 = kt * 32;
      const __mmask16 lo = lanes16(cols - k0), hi = lanes16(cols - k0 - 16);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i) {
        if (i >= rows) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const float* xr = x + (nt * 16 + i) * cols + k0;
        r[i] = to_bf16_pairs(_mm512_maskz_loadu_ps(lo, xr), _mm512_maskz_loadu_ps(hi, xr + 16));
      }
      transpose16(r);
      uint16_t* tile = out + (nt * kts + kt) * kTileWords;
      for (int64_t j = 0; j < 16; ++j) _mm512_store_si512(tile + j * 32, r[j]);
    }
  }
}

void pack_product_x(const float* x, int64_t batch, int64_t cols, uint16_t* out) {
  if (batch > 16) return pack_x(x, batch, cols, out);
  // Step kt's tile: 16 rows (pairs of columns) of `batch` dwords; the zeros beyond cols
  // included.
  const int64_t kts = (cols + 31) / 32;
  uint32_t* o = reinterpret_cast<uint32_t*>(out);
  for (int64_t kt = 0; kt < kts; ++kt) {
    const int64_t k0 = kt * 32;
    const __mmask16 lo = lanes16(cols - k0), hi = lanes16(cols - k0 - 16);
    for (int64_t n = 0; n < batch; ++n) {
      const float* xr = x + n * cols + k0;
      alignas(64) uint32_t pairs[16];
      _mm512_store_si512(
          pairs, to_bf16_pairs(_mm512_maskz_loadu_ps(lo, xr), _mm512_maskz_loadu_ps(hi, xr + 16)));
      for (int64_t j = 0; j < 16; ++j) o[(kt * 16 + j) * batch + n] = pairs[j];
    }
  }
}

int64_t scratch_bytes() { return kABytes + kCBytes; }

void fp8_rows(const Fp8Matrix& w, const uint16_t* xp, int64_t batch, float* y, int64_t r0,
              int64_t r1, void* scratch) {
  run_rows(Fp8Source{w}, w.rows, w.cols, xp, batch, y, r0, r1, scratch);
}

void fp4_rows(const Fp4Matrix& w, const uint16_t* xp, int64_t batch, float* y, int64_t r0,
              int64_t r1, void* scratch) {
  run_rows(Fp4Source{w}, w.rows, w.cols, xp, batch, y, r0, r1, scratch);
}

void bf16_rows(const Bf16Matrix& w, const uint16_t* xp, int64_t batch, float* y, int64_t r0,
               int64_t r1, void* scratch) {
  run_rows(Bf16Source{w}, w.rows, w.cols, xp, batch, y, r0, r1, scratch);
}

}  // namespace fathom::kernels::cpu::amx
