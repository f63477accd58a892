// The DSpark Markov bias: the AVX2 kernel against the scalar reference, bit for bit, over
// vocabulary sizes around its 16-row blocks and ranks around its 4-column steps, with values
// spanning many exponents (sums that cancel, subnormal products) — and against a direct
// computation of one entry in long double, so the reference is the sum it claims to be.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/markov.h"

namespace fathom::kernels {
namespace {

TEST(MarkovBias, Avx2MatchesTheReferenceBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-60, 20);
  for (int64_t V : {1, 15, 16, 17, 100, 1003}) {
    for (int64_t R : {1, 3, 4, 7, 32, 64, 67}) {
      std::vector<float> head(static_cast<size_t>(V * R)), embed(static_cast<size_t>(R)),
          base(static_cast<size_t>(V));
      for (float& x : head) x = std::ldexp(normal(rng), exponent(rng) / 4);
      for (float& x : embed) x = std::ldexp(normal(rng), exponent(rng) / 4);
      for (float& x : base) x = normal(rng);
      head[0] = 1e-30f;  // a subnormal product
      embed[0] = 1e-20f;
      std::vector<float> want = base, got = base;
      ref::markov_bias(head.data(), V, R, embed.data(), want.data());
      cpu::markov_bias(head.data(), V, R, embed.data(), got.data());
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << V << " x " << R;
    }
  }
}

TEST(MarkovBias, TheReferenceIsTheSumInDoubleInOrder) {
  const int64_t V = 2, R = 3;
  const std::vector<float> head = {1e8f, 1.0f, -1e8f, 0.5f, 0.25f, 0.125f};
  const std::vector<float> embed = {1.0f, 3e-8f, 1.0f};
  std::vector<float> logits = {0.0f, 1.0f};
  ref::markov_bias(head.data(), V, R, embed.data(), logits.data());
  // Row 0: 1e8 + 3e-8 - 1e8 in double keeps 2.98e-8 (a float sum would give 0).
  EXPECT_EQ(logits[0], float((1e8 + double(1.0f) * double(3e-8f)) - 1e8));
  EXPECT_NE(logits[0], 0.0f);
  EXPECT_EQ(logits[1], 1.0f + float(0.5 + 0.25 * double(3e-8f) + 0.125));
}

}  // namespace
}  // namespace fathom::kernels
