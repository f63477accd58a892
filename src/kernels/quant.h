// The number formats of V4.1 checkpoints: FP8 E4M3 weights with UE8M0 (power-of-two) block
// scales, FP4 E2M1 routed-expert weights (two per byte, the low nibble the even element)
// with UE8M0 per 32, and BF16. Decoding is exact; pure inline functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace fathom::kernels {

// E4M3 (bias 7, no infinities; 0x7F/0xFF are NaN).
inline float e4m3_to_float(uint8_t b) {
  int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 0x7;
  float v;
  if (exp == 0xF && man == 0x7) return std::nanf("");
  if (exp == 0) {
    v = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    v = std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
  }
  return sign ? -v : v;
}

// UE8M0: 2^(b - 127), built from the exponent bits (no libm call on the hot path); 0xFF
// is NaN.
inline float e8m0_to_float(uint8_t b) {
  uint32_t bits = b == 0 ? 0x00400000u : b == 0xFF ? 0x7FC00000u : uint32_t(b) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// E2M1 magnitudes for codes 0..7; bit 3 is the sign.
inline float e2m1_to_float(uint8_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = kMag[code & 7];
  return (code & 8) ? -v : v;
}

inline float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The 256-entry E4M3 table (built once).
const float* e4m3_table();

// v rounded to the nearest E4M3 value (ties to even), saturating at +-448.
float round_to_e4m3(float v);

// The E4M3 code of v, an E4M3 value (as round_to_e4m3 gives); the sign from v's sign bit.
uint8_t e4m3_code(float v);

// v rounded to the nearest E2M1 value (ties to the even code), saturating at +-6.
float round_to_e2m1(float v);

// The FP4 fake-quant's block scale from the block's amax (ref::fake_quant_e2m1): an E4M3
// scale e4m3(max(amax, 6*2^-9) / 6), or an E8M0 one 2^ceil(log2(max(amax, 6*2^-126) / 6)).
float e2m1_block_scale(float amax, bool e4m3_scale);

namespace ref {
// The reference's activation fake-quant before an FP8/FP4 GEMM (`act_quant`): per block of
// 32, scale = 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))), y = e4m3(x / scale) * scale.
// REQUIRES: n % 32 == 0. x and y may alias.
void fake_quant_e4m3(const float* x, int64_t n, float* y);

// The reference's FP4 fake-quant (`fp4_act_quant`, in place): per block of `block`,
// y = e2m1(clamp(x / scale, -6, 6)) * scale with either an E8M0 scale
// 2^ceil(log2(max(amax, 6*2^-126) * fp32(1/6))) (index keys and queries, blocks of 32) or
// an E4M3 scale e4m3(max(amax, 6*2^-9) / 6) (compressed KV, blocks of 16).
// REQUIRES: n % block == 0. x and y may alias.
void fake_quant_e2m1(const float* x, int64_t n, int64_t block, bool e4m3_scale, float* y);
}  // namespace ref

namespace cpu {
// ref::fake_quant_e4m3 bit for bit, in branch-free arithmetic on the floats' bits (the
// power-of-two scale from the exponent of amax / 448, E4M3 rounding by a carry into bit 20
// above 2^-6 and by adding 2^14 below, where fp32's grid is E4M3's), eight lanes at a time.
// REQUIRES: n % 32 == 0. x and y may alias.
void fake_quant_e4m3(const float* x, int64_t n, float* y);
// ref::fake_quant_e2m1 bit for bit: the block's scale as the reference computes it, each
// value divided by it (for a power-of-two scale, multiplied by its exact inverse: the same
// rounding), clamped and rounded to E2M1 by comparisons, eight lanes at a time.
// REQUIRES: n % block == 0, block % 8 == 0. x and y may alias.
void fake_quant_e2m1(const float* x, int64_t n, int64_t block, bool e4m3_scale, float* y);
}  // namespace cpu

}  // namespace fathom::kernels
