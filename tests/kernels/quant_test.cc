// E4M3 rounding, the activation fake-quant and double -> bf16 rounding against their
// definitions: every E4M3 value is a fixed point, midpoints between neighbours go to the even
// code, and a double is rounded once (no fp32 step).
#include <gtest/gtest.h>

#include <random>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/norm.h"
#include "kernels/quant.h"

namespace fathom::kernels {
namespace {

TEST(E4m3Rounding, GridPointsTiesAndSaturation) {
  std::vector<float> grid;  // the finite non-negative E4M3 values, ascending
  for (int b = 0; b < 0x7F; ++b) grid.push_back(e4m3_to_float(uint8_t(b)));
  for (size_t i = 0; i < grid.size(); ++i) {
    EXPECT_EQ(round_to_e4m3(grid[i]), grid[i]);
    EXPECT_EQ(round_to_e4m3(-grid[i]), -grid[i]);
    if (i + 1 == grid.size()) continue;
    const float mid = (grid[i] + grid[i + 1]) / 2;            // exact in fp32
    const float even = (i % 2 == 0) ? grid[i] : grid[i + 1];  // code i is even iff i is
    EXPECT_EQ(round_to_e4m3(mid), even) << mid;
    EXPECT_EQ(round_to_e4m3(std::nextafter(mid, 0.0f)), grid[i]) << mid;
    EXPECT_EQ(round_to_e4m3(std::nextafter(mid, 1e9f)), grid[i + 1]) << mid;
  }
  EXPECT_EQ(grid.back(), 448.0f);
  EXPECT_EQ(round_to_e4m3(1000.0f), 448.0f);
  EXPECT_EQ(round_to_e4m3(-1e30f), -448.0f);
}

TEST(E4m3Rounding, FakeQuantUsesPowerOfTwoBlockScales) {
  std::vector<float> x(64), y(64);
  for (int i = 0; i < 32; ++i) x[i] = float(i) - 15.5f;   // amax 16: scale 2^ceil(log2(16/448))
  for (int i = 32; i < 64; ++i) x[i] = 1e-6f * float(i);  // amax below 1e-4: clamped
  ref::fake_quant_e4m3(x.data(), 64, y.data());
  const float s0 = std::ldexp(1.0f, -4);  // 16/448 = 0.0357 -> 2^-4 = 0.0625
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], round_to_e4m3(x[i] / s0) * s0) << i;
  const float s1 = std::ldexp(1.0f, -22);  // 1e-4/448 = 2.2e-7 -> 2^-22 = 2.4e-7
  for (int i = 32; i < 64; ++i) EXPECT_EQ(y[i], round_to_e4m3(x[i] / s1) * s1) << i;
  // An amax whose scale is exactly a power of two keeps that power (56 / 448 = 2^-3, not
  // 2^-2): 3 * 2^-12 is then 3 E4M3 subnormal steps, where 2^-2 would round it to 2 (even).
  std::vector<float> z(32, 1.0f);
  z[0] = 56.0f;
  z[1] = 3 * std::ldexp(1.0f, -12);
  ref::fake_quant_e4m3(z.data(), 32, z.data());
  EXPECT_EQ(z[0], 56.0f);
  EXPECT_EQ(z[1], 3 * std::ldexp(1.0f, -12));
  EXPECT_EQ(z[2], 1.0f);
}

TEST(Bf16Rounding, DoubleRoundsThroughFp32AsTorchDoes) {
  // torch casts a double to bf16 through fp32. 1 + 2^-8 + 2^-40 lies just above the bf16
  // midpoint 1 + 2^-8; a direct rounding would go up to 1 + 2^-7, but the fp32 step lands on
  // the midpoint, which then rounds to even (1).
  EXPECT_EQ(round_double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 1.0f);
  EXPECT_EQ(round_double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20)),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(round_double_to_bf16(1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -20)), 1.0f);
  EXPECT_EQ(round_double_to_bf16(-(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20))),
            -(1.0f + std::ldexp(1.0f, -7)));
  EXPECT_EQ(round_double_to_bf16(0.3), round_to_bf16(0.3f));
}

TEST(E2m1Rounding, GridTiesToEvenCodeAndSaturation) {
  // E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}; codes 0..7, even codes win ties.
  const float mids[][2] = {{0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
                           {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f}};
  for (auto [x, want] : mids) {
    EXPECT_EQ(round_to_e2m1(x), want) << x;
    EXPECT_EQ(round_to_e2m1(-x), -want) << x;
  }
  EXPECT_EQ(round_to_e2m1(0.26f), 0.5f);
  EXPECT_EQ(round_to_e2m1(2.51f), 3.0f);
  EXPECT_EQ(round_to_e2m1(5.01f), 6.0f);
  EXPECT_EQ(round_to_e2m1(100.0f), 6.0f);
  for (float g : {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f}) EXPECT_EQ(round_to_e2m1(g), g);
}

TEST(E2m1Rounding, FakeQuantScales) {
  // E8M0 branch: amax 3 -> 3/6 = 0.5 -> scale 2^-1; values land on the grid times 0.5.
  std::vector<float> x(32, 0.0f), y(32);
  x[0] = 3.0f;
  x[1] = 0.3f;  // 0.6 on the grid -> 0.5 -> 0.25
  ref::fake_quant_e2m1(x.data(), 32, 32, false, y.data());
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[1], 0.25f);
  // E4M3 branch, blocks of 16: amax 3.3 -> 0.55 -> e4m3 0.5625; 3.3 / 0.5625 = 5.87 -> 6.
  std::vector<float> z(16, 0.0f), w(16);
  z[0] = 3.3f;
  ref::fake_quant_e2m1(z.data(), 16, 16, true, w.data());
  EXPECT_EQ(w[0], 6.0f * 0.5625f);
}

// Elements where the fast kernel's output is not the reference's bit for bit (a NaN equals a
// NaN); the first five are reported with `context`.
int64_t bit_differences(const std::vector<float>& x, const std::vector<float>& want,
                        const std::vector<float>& got, const std::string& context) {
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&want[i], &got[i], 4) != 0 && !(std::isnan(want[i]) && std::isnan(got[i])))
      if (++differ <= 5)
        ADD_FAILURE() << "x " << x[i] << ": ref " << want[i] << " fast " << got[i] << context;
  return differ;
}

// The fast fake-quant is the reference's bit for bit: blocks of every magnitude (the scale
// from 2^-22 up), values on E4M3 ties and on the normal/subnormal boundary, zeros of both
// signs, saturation, and NaN.
TEST(E4m3Rounding, FastFakeQuantIsTheReferenceBitForBit) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-40, 20);
  std::vector<float> x(size_t(32 * 4000)), want(x.size()), got(x.size());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const int base = expo(rng);
    for (size_t i = 0; i < 32; ++i) {
      float v = std::ldexp(mant(rng), base - int(rng() % 24));
      if (rng() % 2) v = -v;
      switch (rng() % 16) {
        case 0:
          v = 0.0f;
          break;
        case 1:
          v = -0.0f;
          break;
        case 2:  // an E4M3 tie of the block's scale: (k + 1/2) steps
          v = std::ldexp(float(2 * (8 + rng() % 8) + 1), base - 4);
          break;
        case 3:
          v = std::ldexp(1.0f, base - 6);
          break;
        default:
          break;
      }
      x[b * 32 + i] = v;
    }
  }
  x[7] = std::nanf("");
  x[40] = 1e30f;
  x[41] = -1e30f;
  ref::fake_quant_e4m3(x.data(), int64_t(x.size()), want.data());
  cpu::fake_quant_e4m3(x.data(), int64_t(x.size()), got.data());
  EXPECT_EQ(bit_differences(x, want, got, ""), 0);
  // In place, as the model calls it.
  std::vector<float> inplace(x);
  cpu::fake_quant_e4m3(inplace.data(), int64_t(inplace.size()), inplace.data());
  EXPECT_EQ(std::memcmp(inplace.data() + 32, got.data() + 32, (got.size() - 32) * 4), 0);
}

// The vectorised E2M1 fake-quant against the reference, bit for bit, with both scale kinds
// (E8M0 per 32, E4M3 per 16): values on and halfway between E2M1 grid points of the block's
// scale (ties to the even code), zeros of both signs, the clamp at +-6, tiny blocks that hit
// the scale floors, NaN and huge values.
TEST(E2m1Rounding, FastFakeQuantIsTheReferenceBitForBit) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-140, 40);
  static constexpr float kGrid[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f,
                                    2.0f, 2.5f,  3.0f, 3.5f,  4.0f, 5.0f,  6.0f};
  for (const bool e4m3_scale : {false, true}) {
    const int64_t block = e4m3_scale ? 16 : 32;
    std::vector<float> x(size_t(block * 3000)), want(x.size()), got(x.size());
    for (size_t b = 0; b < x.size() / size_t(block); ++b) {
      const int base = expo(rng);
      for (size_t i = 0; i < size_t(block); ++i) {
        float v = std::ldexp(mant(rng), base - int(rng() % 6));
        switch (rng() % 8) {
          case 0:
            v = 0.0f;
            break;
          case 1:
            v = -0.0f;
            break;
          case 2:  // a grid point or a midpoint of a power-of-two scale near the block's
          case 3:
            v = std::ldexp(kGrid[rng() % 15], base - 2);
            break;
          default:
            break;
        }
        if (rng() % 2) v = -v;
        x[b * size_t(block) + i] = v;
      }
    }
    x[5] = std::nanf("");
    x[size_t(block) + 2] = 1e38f;
    x[size_t(block) + 3] = -1e38f;
    ref::fake_quant_e2m1(x.data(), int64_t(x.size()), block, e4m3_scale, want.data());
    cpu::fake_quant_e2m1(x.data(), int64_t(x.size()), block, e4m3_scale, got.data());
    EXPECT_EQ(bit_differences(x, want, got, " block " + std::to_string(block)), 0)
        << "e4m3 scale " << e4m3_scale;
    std::vector<float> inplace(x);
    cpu::fake_quant_e2m1(inplace.data(), int64_t(inplace.size()), block, e4m3_scale,
                         inplace.data());
    EXPECT_EQ(std::memcmp(inplace.data() + 2 * block, got.data() + 2 * block,
                          (got.size() - size_t(2 * block)) * 4),
              0);
  }
}

// The vectorised SwiGLU against its libm twin: within a bf16 step of |h| (the exp polynomial
// is a few ulps from expf), on gates and ups over the whole range (the clamps, large
// negative gates, zeros), weighted and not, including a length with a scalar tail.
TEST(SwiGlu, LanesMatchTheReferenceWithinABf16Step) {
  std::mt19937 rng(31);
  std::normal_distribution<float> g(0.0f, 6.0f);
  const int64_t n = 1003;
  std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n)),
      want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    gate[size_t(i)] = i % 50 == 0 ? -120.0f : i % 51 == 0 ? 0.0f : g(rng);
    up[size_t(i)] = i % 47 == 0 ? 30.0f : g(rng);
  }
  int64_t differ = 0;
  for (float weight : {1.0f, 0.37f}) {
    ref::swiglu_bf16(gate.data(), up.data(), n, 10.0f, weight, want.data());
    cpu::swiglu_bf16(gate.data(), up.data(), n, 10.0f, weight, got.data());
    for (int64_t i = 0; i < n; ++i) {
      const float w = want[size_t(i)], v = got[size_t(i)];
      if (w != v) ++differ;
      ASSERT_LE(std::fabs(double(w) - double(v)), std::ldexp(std::fabs(double(w)), -7) + 1e-30)
          << "gate " << gate[size_t(i)] << " up " << up[size_t(i)];
    }
  }
  EXPECT_LT(differ, 2 * n / 20) << "more than 1 in 20 outputs off by a bf16 step";
}

}  // namespace
}  // namespace fathom::kernels
