// Fast kernels against their scalar twins on random inputs, on every kernel path this machine
// has (the others are printed as untested), and the number formats against their
// definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/dot.h"
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "kernels/quant.h"

namespace fathom::kernels {
namespace {

// The paths this machine runs; the first call prints them, and the untested ones with why.
std::vector<CpuPath> tested_paths() {
  static const std::vector<CpuPath> paths = [] {
    std::vector<CpuPath> v;
    std::string tested, untested;
    for (CpuPath p : kAllCpuPaths) {
      if (cpu_path_available(p)) {
        v.push_back(p);
        tested += std::string(" ") + cpu_path_name(p);
      } else {
        untested += std::string(" ") + cpu_path_name(p) + " (" + cpu_path_missing(p) + ")";
      }
    }
    std::printf("kernel paths tested:%s; untested:%s\n", tested.c_str(),
                untested.empty() ? " none" : untested.c_str());
    return v;
  }();
  return paths;
}

TEST(Formats, E4M3E2M1E8M0Bf16) {
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);                // largest finite
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0xC0), -2.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_float(130), 8.0f);
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_to_float(uint8_t(c)), (c & 8 ? -1 : 1) * mags[c & 7]);
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC040), -3.0f);
}

struct Case {
  int64_t m, k, n;
};

// |fast - ref| <= 1e-5 * sum|w x| + 1e-30: fp32 accumulation of K products against one
// rounding of an exact (double) sum.
void expect_close(const std::vector<float>& fast, const std::vector<float>& ref,
                  const std::vector<double>& mag) {
  ASSERT_EQ(fast.size(), ref.size());
  for (size_t i = 0; i < fast.size(); ++i) {
    ASSERT_LE(std::fabs(double(fast[i]) - double(ref[i])), 1e-5 * mag[i] + 1e-30)
        << "element " << i;
  }
}

// x as a path multiplies it (bf16-rounded on AMX).
std::vector<float> as_multiplied(CpuPath path, const std::vector<float>& x) {
  std::vector<float> v(x);
  if (rounds_activations_to_bf16(path))
    for (auto& f : v) f = bf16_to_float(float_to_bf16(f));
  return v;
}

TEST(Kernels, FastEqualsReferenceWithinBound) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  // Batches of 1..16, 17..32 and more take the AMX kernels' three loop shapes; M and K not
  // multiples of 16 and 32 leave partial tiles.
  for (Case c : {Case{1, 32, 1}, Case{37, 64, 1}, Case{64, 96, 3}, Case{96, 320, 17},
                 Case{5, 1024, 2}, Case{21, 4128, 5}, Case{70, 544, 40}}) {
    std::uniform_real_distribution<float> ux(-2, 2);
    std::vector<float> x(size_t(c.n * c.k));
    for (auto& v : x) v = ux(rng);
    // FP4.
    std::vector<uint8_t> w4(size_t(c.m * c.k / 2)), s4(size_t(c.m * c.k / 32));
    for (auto& b : w4) b = uint8_t(rng());
    for (auto& b : s4) b = uint8_t(120 + rng() % 12);
    Fp4Matrix f4{w4.data(), s4.data(), c.m, c.k};
    // FP8 (no NaN codes), K not always a multiple of 32.
    int64_t k8 = c.k - (c.k > 40 ? 7 : 0);
    std::vector<float> x8(size_t(c.n * k8));
    for (auto& v : x8) v = ux(rng);
    std::vector<uint8_t> w8(size_t(c.m * k8)), s8(size_t(((c.m + 31) / 32) * ((k8 + 31) / 32)));
    for (auto& b : w8) {
      b = uint8_t(rng());
      if ((b & 0x7F) == 0x7F) b ^= 1;
    }
    for (auto& b : s8) b = uint8_t(115 + rng() % 20);
    Fp8Matrix f8{w8.data(), s8.data(), c.m, k8};
    // BF16.
    std::vector<uint16_t> wb(size_t(c.m * k8));
    for (auto& h : wb) h = uint16_t(0x3C00 + rng() % 0x0800) | uint16_t((rng() & 1) << 15);
    Bf16Matrix fb{wb.data(), c.m, k8};

    auto magnitude = [&](auto weight_at, const std::vector<float>& xs, int64_t k) {
      std::vector<double> mag(size_t(c.n * c.m));
      for (int64_t n = 0; n < c.n; ++n)
        for (int64_t m = 0; m < c.m; ++m) {
          double s = 0;
          for (int64_t kk = 0; kk < k; ++kk)
            s += std::fabs(weight_at(m, kk) * double(xs[size_t(n * k + kk)]));
          mag[size_t(n * c.m + m)] = s;
        }
      return mag;
    };
    std::vector<float> r(size_t(c.n * c.m)), f(size_t(c.n * c.m));
    auto mag4 = magnitude(
        [&](int64_t m, int64_t k) {
          uint8_t byte = w4[size_t(m * c.k / 2 + k / 2)];
          return double(e2m1_to_float((k & 1) ? byte >> 4 : byte & 15)) *
                 e8m0_to_float(s4[size_t(m * c.k / 32 + k / 32)]);
        },
        x, c.k);
    for (CpuPath path : tested_paths()) {
      ref::matmul_fp4(f4, as_multiplied(path, x).data(), c.n, r.data());
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        cpu::matmul_fp4(path, f4, x.data(), c.n, f.data(), p);
        expect_close(f, r, mag4);
      }
    }
    auto mag8 = magnitude(
        [&](int64_t m, int64_t k) {
          return double(e4m3_to_float(w8[size_t(m * k8 + k)])) *
                 e8m0_to_float(s8[size_t((m / 32) * ((k8 + 31) / 32) + k / 32)]);
        },
        x8, k8);
    for (CpuPath path : tested_paths()) {
      ref::matmul_fp8(f8, as_multiplied(path, x8).data(), c.n, r.data());
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        cpu::matmul_fp8(path, f8, x8.data(), c.n, f.data(), p);
        expect_close(f, r, mag8);
      }
    }
    auto magb = magnitude(
        [&](int64_t m, int64_t k) { return double(bf16_to_float(wb[size_t(m * k8 + k)])); }, x8,
        k8);
    for (CpuPath path : tested_paths()) {
      ref::matmul_bf16(fb, as_multiplied(path, x8).data(), c.n, r.data());
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        cpu::matmul_bf16(path, fb, x8.data(), c.n, f.data(), p);
        expect_close(f, r, magb);
      }
    }
  }
}

// Scales at the ends of the formats' ranges (the AMX decoders' scalar paths: E2M1 scales of
// 2^-127 and above 1, E4M3 scales outside 2^-117..2^119), subnormal and zero E4M3 codes
// and negative zeros, against the reference.
TEST(Kernels, ExtremeScalesAndSubnormalCodes) {
  std::mt19937 rng(5);
  const int64_t m = 48, k = 128, n = 3;
  std::uniform_real_distribution<float> ux(-2, 2);
  std::vector<float> x(size_t(n * k)), r(size_t(n * m)), f(size_t(n * m));
  for (auto& v : x) v = ux(rng);
  std::vector<uint8_t> w4(size_t(m * k / 2)), s4(size_t(m * k / 32));
  for (auto& b : w4) b = uint8_t(rng());
  const uint8_t scales4[] = {0, 1, 2, 126, 127, 128, 140};
  for (size_t i = 0; i < s4.size(); ++i) s4[i] = scales4[i % 7];
  std::vector<uint8_t> w8(size_t(m * k)), s8(size_t((m + 31) / 32 * (k / 32))), s8_high(s8.size());
  for (size_t i = 0; i < w8.size(); ++i) {
    const uint8_t codes[] = {0x00, 0x80, 0x01, 0x87, 0x05, 0x08, 0xC1, 0x7E};
    w8[i] = i % 3 == 0 ? codes[(i / 3) % 8] : uint8_t(rng() % 0x7F) | uint8_t(rng() & 0x80);
  }
  // Low scales beside ordinary ones; high scales with activations small enough that no sum
  // overflows (the AVX paths fold 2^8 into an E4M3 scale, so theirs stop at 2^119).
  const uint8_t scales8[] = {3, 9, 10, 127, 120, 2, 126, 8};
  const bool amx = cpu_path_available(CpuPath::kAmx);
  const uint8_t scales8_high[] = {246, 240, 200, 230, 127, 220, 190, 210};
  const uint8_t scales8_amx[] = {246, 247, 250, 200, 252, 127, 240, 251};
  for (size_t i = 0; i < s8.size(); ++i) {
    s8[i] = scales8[i % 8];
    s8_high[i] = scales8_high[i % 8];
  }
  // Scales above 2^119: the AMX decoders' scalar path and the AVX-512 BF16 float route
  // (their weights must stay below 2^128: codes of magnitude below 2).
  std::vector<uint8_t> s8_amx(s8.size()), w8_small(w8);
  for (size_t i = 0; i < s8.size(); ++i) s8_amx[i] = scales8_amx[i % 8];
  for (auto& b : w8_small) b &= 0xBF;
  const Fp8Matrix f8_amx{w8_small.data(), s8_amx.data(), m, k};
  std::vector<float> x_small(x);
  for (auto& v : x_small) v = std::ldexp(v, -100);
  const Fp4Matrix f4{w4.data(), s4.data(), m, k};
  const Fp8Matrix f8{w8.data(), s8.data(), m, k}, f8_high{w8.data(), s8_high.data(), m, k};
  for (CpuPath path : tested_paths()) {
    for (int which = 0; which < 4; ++which) {
      // The fp32 AVX paths fold 2^8 into the scale, so they stop at 2^119.
      if (which == 3 && (path == CpuPath::kAvx2 || path == CpuPath::kAvx512)) continue;
      const std::vector<float> xm = as_multiplied(path, which >= 2 ? x_small : x);
      const float* xf = which >= 2 ? x_small.data() : x.data();
      const Fp8Matrix& w = which == 1 ? f8 : which == 2 ? f8_high : f8_amx;
      if (which == 0) {
        ref::matmul_fp4(f4, xm.data(), n, r.data());
        cpu::matmul_fp4(path, f4, xf, n, f.data(), nullptr);
      } else {
        ref::matmul_fp8(w, xm.data(), n, r.data());
        cpu::matmul_fp8(path, w, xf, n, f.data(), nullptr);
      }
      for (size_t i = 0; i < r.size(); ++i) {
        // Products below the fp32 normal range may be flushed (AMX reads subnormal bf16
        // inputs as zero): allow that much beside the usual bound.
        const double mag = std::fabs(double(r[i])) + 1e-30;
        ASSERT_LE(std::fabs(double(f[i]) - double(r[i])), 1e-4 * mag + 1e-36)
            << cpu_path_name(path) << " case " << which << " element " << i;
      }
    }
  }
  if (!amx) std::printf("the AMX decoders' high-scale path: untested (no AMX)\n");
}

TEST(Kernels, Bf16MatmulIsBatchInvariant) {
  // The model's head multiplies every sequence of a step at once: each row of a batch must
  // equal that row alone (the GEMV), bit for bit, whatever the batch size or thread count.
  std::mt19937 rng(11);
  ThreadPool pool(2);
  std::uniform_real_distribution<float> ux(-2, 2);
  // K = 64 and 256: whole chunks, whose panels the AVX-512 BF16 kernel reads from the weights
  // (with 45 rows, the last panel is copied).
  for (int64_t k : {int64_t(16), int64_t(37), int64_t(64), int64_t(256), int64_t(301)}) {
    // 300 rows: many thread ranges; 300 activation rows: more than one AMX output block.
    const int64_t m = k == 256 ? 300 : 45;
    for (int64_t n : {int64_t(9), int64_t(40), int64_t(k == 256 ? 300 : 30)}) {
      std::vector<uint16_t> wb(size_t(m * k));
      for (auto& h : wb) h = uint16_t(0x3C00 + rng() % 0x0800) | uint16_t((rng() & 1) << 15);
      Bf16Matrix fb{wb.data(), m, k};
      std::vector<float> x(static_cast<size_t>(n * k)), batched(static_cast<size_t>(n * m)),
          alone(static_cast<size_t>(m));
      for (auto& v : x) v = ux(rng);
      for (CpuPath path : tested_paths())
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          cpu::matmul_bf16(path, fb, x.data(), n, batched.data(), p);
          for (int64_t r = 0; r < n; ++r) {
            cpu::matmul_bf16(path, fb, x.data() + r * k, 1, alone.data(), p);
            EXPECT_EQ(std::memcmp(alone.data(), batched.data() + r * m, size_t(m) * 4), 0)
                << cpu_path_name(path) << " k " << k << " n " << n << " row " << r;
          }
        }
    }
  }
}

// Every row of a batched FP8/FP4 product must equal that row alone (the decode GEMV), bit for
// bit, whatever the batch size, the row range or the thread count: prefill chunks of any
// size, batched decode and single-token decode then give a sequence the same numbers. Seven
// and nine rows make a full group (six rows in the AVX-512 BF16 kernel, eight in the fp32 one)
// and a partial one, 20 and 37 several; 300 rows span many FP8 scale bands and thread ranges;
// K = 4128 is a long row.
TEST(Kernels, Fp8Fp4MatmulAreBatchInvariant) {
  std::mt19937 rng(17);
  ThreadPool pool(2);
  std::uniform_real_distribution<float> ux(-2, 2);
  for (int64_t k : {int64_t(32), int64_t(64), int64_t(256), int64_t(320), int64_t(4128)}) {
    for (int64_t m : {int64_t(45), int64_t(70), int64_t(300)}) {
      if (k == 4128 && m == 300) continue;  // long enough with m = 45 and 70
      std::vector<uint8_t> w4(size_t(m * k / 2)), s4(size_t(m * k / 32));
      for (auto& b : w4) b = uint8_t(rng());
      for (auto& b : s4) b = uint8_t(120 + rng() % 12);
      Fp4Matrix f4{w4.data(), s4.data(), m, k};
      for (int64_t k8 : {k, k + 5}) {
        std::vector<uint8_t> w8(size_t(m * k8)), s8(size_t((m + 31) / 32 * ((k8 + 31) / 32)));
        for (auto& b : w8) b = uint8_t(rng() % 0x7F) | uint8_t(rng() & 0x80);  // no NaN
        // Mostly ordinary scales, some below 2^-117 (the AVX-512 BF16 decoder's float route).
        for (auto& b : s8) b = rng() % 4 == 0 ? uint8_t(2 + rng() % 8) : uint8_t(118 + rng() % 12);
        Fp8Matrix f8{w8.data(), s8.data(), m, k8};
        for (int64_t n :
             {int64_t(2), int64_t(3), int64_t(7), int64_t(9), int64_t(20), int64_t(37)}) {
          std::vector<float> x(size_t(n * k8)), batched(size_t(n * m)),
              alone(static_cast<size_t>(m));
          for (auto& v : x) v = ux(rng);
          for (CpuPath path : tested_paths())
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              const char* name = cpu_path_name(path);
              cpu::matmul_fp8(path, f8, x.data(), n, batched.data(), p);
              for (int64_t r = 0; r < n; ++r) {
                cpu::matmul_fp8(path, f8, x.data() + r * k8, 1, alone.data(), p);
                EXPECT_EQ(std::memcmp(alone.data(), batched.data() + r * m, size_t(m) * 4), 0)
                    << name << " fp8 m " << m << " k " << k8 << " n " << n << " row " << r;
              }
              if (k8 != k) continue;
              cpu::matmul_fp4(path, f4, x.data(), n, batched.data(), p);
              for (int64_t r = 0; r < n; ++r) {
                cpu::matmul_fp4(path, f4, x.data() + r * k, 1, alone.data(), p);
                EXPECT_EQ(std::memcmp(alone.data(), batched.data() + r * m, size_t(m) * 4), 0)
                    << name << " fp4 m " << m << " k " << k << " n " << n << " row " << r;
              }
            }
        }
      }
    }
  }
}

// The FP8 GEMV's fast loop (bands whose full chunks' scales all take the AVX-512 BF16
// decoder's direct route, 10..246) against the batched kernels' chunk decoder, bit for bit:
// scales at both edges of that range, all E4M3 codes (zero exponents included), a tail chunk
// whose scale is outside the range (the band still takes the fast loop for its full chunks), a
// band with one out-of-range scale among its full chunks (the general loop), rows past 8,192
// columns (several column blocks) and past 32,768 (more full chunks than the fast loop keeps
// offsets for: the general loop), and odd row ranges whose lone last row and second stream lie in
// different bands.
TEST(Kernels, Fp8GemvOnDirectBandsIsBatchInvariant) {
  std::mt19937 rng(23);
  ThreadPool pool(2);
  std::uniform_real_distribution<float> ux(-2, 2);
  for (bool high : {false, true}) {
    // Low scales with ordinary x; high ones with x * 2^-100 so sums stay finite.
    const std::vector<uint8_t> edge =
        high ? std::vector<uint8_t>{230, 240, 245, 246} : std::vector<uint8_t>{10, 11, 15, 20};
    const float x_scale = high ? std::ldexp(1.0f, -100) : 1.0f;
    for (int64_t k : {int64_t(4133), int64_t(8197), int64_t(32801)}) {
      for (int64_t m : {int64_t(45), int64_t(291)}) {
        const int64_t chunks = (k + 31) / 32, bands = (m + 31) / 32;
        std::vector<uint8_t> w(size_t(m * k)), s(size_t(bands * chunks));
        for (auto& b : w) b = uint8_t(rng() % 0x7F) | uint8_t(rng() & 0x80);  // no NaN
        for (auto& b : s) b = edge[rng() % edge.size()];
        s[size_t(1 * chunks + chunks - 1)] = 9;         // band 1: its tail only
        s[size_t(bands - 1) * size_t(chunks) + 3] = 9;  // the last band: general
        Fp8Matrix f{w.data(), s.data(), m, k};
        for (int64_t n : {int64_t(2), int64_t(9)}) {
          std::vector<float> x(size_t(n * k)), batched(size_t(n * m)),
              alone(static_cast<size_t>(m));
          for (auto& v : x) v = ux(rng) * x_scale;
          for (CpuPath path : tested_paths())
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              cpu::matmul_fp8(path, f, x.data(), n, batched.data(), p);
              for (int64_t r = 0; r < n; ++r) {
                cpu::matmul_fp8(path, f, x.data() + r * k, 1, alone.data(), p);
                for (int64_t i = 0; i < m; ++i) ASSERT_TRUE(std::isfinite(alone[size_t(i)]));
                EXPECT_EQ(std::memcmp(alone.data(), batched.data() + r * m, size_t(m) * 4), 0)
                    << cpu_path_name(path) << " high " << high << " m " << m << " k " << k << " n "
                    << n << " row " << r;
              }
            }
        }
      }
    }
  }
}

// The blocked dot products are dot_f64_lanes() bit for bit on every path: row groups of 8,
// 4 and 1, lengths with and without a tail past the last 8 columns and past a 256-column
// chunk, blocks of sums beyond the first 25, and values across many binades (so that a
// different order of any two additions would show).
TEST(Kernels, BlockedDotsAreDotF64LanesBitForBit) {
  std::mt19937 rng(41);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-20, 20);
  for (CpuPath path : tested_paths()) {
    for (int64_t n : {1, 7, 8, 40, 263, 520, 8192}) {
      for (int64_t outs : {0, 1, 24, 30}) {
        const int64_t rows = 13;
        std::vector<float> x(size_t(rows * n)), w(size_t(std::max<int64_t>(outs, 1) * n));
        for (auto& v : x) v = std::ldexp(g(rng), e(rng));
        for (auto& v : w) v = std::ldexp(g(rng), e(rng));
        std::vector<double> d(size_t(rows * (outs + 1)), -1.0);
        cpu::dots_f64_lanes(path, x.data(), rows, n, w.data(), outs, d.data());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t o = 0; o <= outs; ++o) {
            const float* a = o < outs ? w.data() + o * n : x.data() + r * n;
            const double want = dot_f64_lanes(a, x.data() + r * n, n);
            const double got = d[size_t(r * (outs + 1) + o)];
            ASSERT_EQ(std::memcmp(&want, &got, sizeof want), 0)
                << cpu_path_name(path) << " n " << n << " outs " << outs << " row " << r << " sum "
                << o << ": " << got << " vs " << want;
          }
      }
    }
  }
}

}  // namespace
}  // namespace fathom::kernels
