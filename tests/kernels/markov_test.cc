// The DSpark Markov bias: the AVX2 kernel against the scalar reference, bit for bit, over
// vocabulary sizes around its 16-row blocks and ranks around its 4-column steps, with values
// spanning many exponents (sums that cancel, subnormal products) — and against a direct
// computation of one entry in long double, so the reference is the sum it claims to be.
#include <gtest/gtest.h>

#include <algorithm>
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

// The pruned argmax gives the reference's id (the full bias, then the first maximum) on
// logits and heads of every balance — bias far below the logits' spread (most rows pruned),
// comparable, and far above it (few pruned) — with exact ties planted between rows and the
// non-finite fallback.
TEST(MarkovArgmax, GivesTheReferencesIdAndPrunesWhenTheBiasIsSmall) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t pruned_cases = 0;
  for (int64_t V : {1, 2, 17, 1000, 5003}) {
    for (int64_t R : {1, 5, 32}) {
      for (float head_scale : {1e-4f, 0.05f, 1.0f, 30.0f}) {
        for (int trial = 0; trial < 4; ++trial) {
          std::vector<float> head(static_cast<size_t>(V * R)), embed(static_cast<size_t>(R)),
              logits(static_cast<size_t>(V));
          for (float& x : head) x = head_scale * normal(rng);
          for (float& x : embed) x = normal(rng);
          for (float& x : logits) x = 4.0f * normal(rng);
          if (V > 2 && trial == 1) {  // an exact tie: row 0 copies the best row
            std::vector<float> scratch(static_cast<size_t>(V));
            const int32_t top =
                ref::markov_argmax(head.data(), V, R, embed.data(), logits.data(), scratch.data());
            std::copy_n(&head[size_t(top * R)], R, head.begin());
            logits[0] = logits[size_t(top)];
          }
          if (V > 2 && trial == 2) {  // a tie where the bias decides against the top logit
            logits[1] = logits[0];
          }
          std::vector<double> norms(static_cast<size_t>(V));
          markov_row_norms(head.data(), V, R, norms.data());
          std::vector<float> scratch(static_cast<size_t>(V));
          const int32_t want =
              ref::markov_argmax(head.data(), V, R, embed.data(), logits.data(), scratch.data());
          int64_t exact = 0;
          const int32_t got = cpu::markov_argmax(head.data(), norms.data(), V, R, embed.data(),
                                                 logits.data(), &exact);
          EXPECT_EQ(got, want) << V << " x " << R << " scale " << head_scale << " trial " << trial;
          if (V >= 1000 && head_scale <= 0.05f && exact < V / 10) ++pruned_cases;
        }
      }
    }
  }
  EXPECT_GE(pruned_cases, 20);  // 2 sizes x 3 ranks x 2 small scales x 4 trials = 48 candidates
  // Non-finite logits take the full computation and still agree.
  const int64_t V = 50, R = 4;
  std::vector<float> head(static_cast<size_t>(V * R), 0.5f), embed(static_cast<size_t>(R), 1.0f),
      logits(static_cast<size_t>(V), 0.0f);
  std::vector<double> norms(static_cast<size_t>(V));
  markov_row_norms(head.data(), V, R, norms.data());
  std::vector<float> scratch(static_cast<size_t>(V));
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    for (int64_t at : {int64_t(0), int64_t(7)}) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      logits[size_t(at)] = bad;
      logits[3] = 1.0f;
      EXPECT_EQ(cpu::markov_argmax(head.data(), norms.data(), V, R, embed.data(), logits.data()),
                ref::markov_argmax(head.data(), V, R, embed.data(), logits.data(), scratch.data()))
          << bad << " at " << at;
    }
  }
}

}  // namespace
}  // namespace fathom::kernels
