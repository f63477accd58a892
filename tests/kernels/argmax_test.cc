// Greedy sampling's argmax: the AVX2 kernel against the scalar loop it replaces, on lengths
// around its 8- and 32-lane blocks, with planted ties (the first must win), NaNs anywhere
// (never winning, and a NaN at index 0 never beaten), infinities and signed zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/argmax.h"

namespace fathom::kernels {
namespace {

TEST(ArgmaxFirst, Avx2MatchesTheScalarLoop) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  int cases = 0;
  for (int64_t n : {1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 100, 1000, 20011}) {
    for (int variant = 0; variant < 8; ++variant) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = normal(rng);
      std::uniform_int_distribution<int64_t> at(0, n - 1);
      const int64_t a = at(rng), b = at(rng);
      switch (variant) {
        case 1:
          x[size_t(b)] = x[size_t(a)] = 100.0f;
          break;  // a tie
        case 2:
          x[size_t(a)] = NAN;
          break;  // a NaN
        case 3:
          x[0] = NAN;
          break;  // a NaN first
        case 4:
          x[size_t(a)] = INFINITY;
          x[size_t(b)] = INFINITY;
          break;
        case 5:
          for (float& v : x) v = -0.0f;
          x[size_t(a)] = 0.0f;
          break;  // signed zeros
        case 6:
          for (float& v : x) v = NAN;
          x[size_t(a)] = -INFINITY;
          break;
        case 7:
          for (float& v : x) v = -INFINITY;
          break;
        default:
          break;
      }
      EXPECT_EQ(cpu::argmax_first(x.data(), n), ref::argmax_first(x.data(), n))
          << "n " << n << " variant " << variant;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 13 * 8);
}

}  // namespace
}  // namespace fathom::kernels
