// Sampling against its definition: greedy is the argmax, the empirical distribution over
// many counter positions matches softmax(logits / T) (and its top-k / top-p / min-p
// truncations), penalties change the logits as the OpenAI and HF rules say, a seeded
// draw depends only on (seed, request, position), and a LogitAdjust is the logits changed by
// hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"

namespace fathom::engine {
namespace {

std::vector<double> histogram(const std::vector<float>& logits, const SamplingParams& p, int n) {
  std::vector<double> h(logits.size(), 0.0);
  SamplerScratch scratch;
  for (int i = 0; i < n; ++i)
    h[size_t(sample_token(logits.data(), int64_t(logits.size()), p, {}, {}, 7, uint64_t(i),
                          scratch))] += 1.0 / n;
  return h;
}

std::vector<double> softmax(const std::vector<float>& l, double t) {
  std::vector<double> p(l.size());
  double m = *std::max_element(l.begin(), l.end()), s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp((l[i] - m) / t);
  for (auto& v : p) v /= s;
  return p;
}

TEST(Sampler, GreedyIsTheArgmaxWithTiesToTheLowerId) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  SamplerScratch scratch;
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample_token(l.data(), 4, p, {}, {}, 0, 0, scratch), 1);
}

TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  std::vector<float> l = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  for (float t : {0.7f, 1.0f, 1.5f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 42;
    auto h = histogram(l, p, 40000);
    auto want = softmax(l, t);
    for (size_t i = 0; i < l.size(); ++i)
      EXPECT_NEAR(h[i], want[i], 0.01) << "t=" << t << " i=" << i;
  }
}

TEST(Sampler, TopKTopPAndMinPTruncate) {
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f, -1.0f};
  auto full = softmax(l, 1.0);
  SamplingParams p;
  p.seed = 1;
  p.top_k = 2;  // renormalised over {0, 1}
  auto h = histogram(l, p, 40000);
  EXPECT_NEAR(h[0], full[0] / (full[0] + full[1]), 0.01);
  EXPECT_EQ(h[2] + h[3] + h[4], 0.0);
  p.top_k = 0;
  p.top_p = 0.9f;  // smallest prefix with mass >= 0.9: {0, 1, 2} (0.665 + 0.245 = 0.909)
  h = histogram(l, p, 40000);
  EXPECT_GT(h[2], 0.0);
  EXPECT_EQ(h[3] + h[4], 0.0);
  p.top_p = 1.0f;
  p.min_p = 0.2f;  // keeps tokens with p >= 0.2 * p_max: {0, 1} (0.368 ratio), not 2 (0.135)
  h = histogram(l, p, 20000);
  EXPECT_EQ(h[2] + h[3] + h[4], 0.0);
  EXPECT_GT(h[1], 0.0);
}

TEST(Sampler, PenaltiesChangeTheLogitsByTheirRules) {
  std::vector<float> l = {1.0f, 1.2f, 0.9f};
  SamplerScratch scratch;
  SamplingParams p;
  p.temperature = 0;
  // Presence 0.5 and frequency 0.1 on token 1 generated twice: 1.2 - 0.5 - 0.2 = 0.5 < 1.0.
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.1f;
  std::vector<int32_t> gen = {1, 1};
  EXPECT_EQ(sample_token(l.data(), 3, p, {}, gen, 0, 0, scratch), 0);
  // Repetition 2 on the prompt's tokens 0 and 1: 0.5, 0.6 -> token 2 (0.9) wins.
  SamplingParams r;
  r.temperature = 0;
  r.repetition_penalty = 2.0f;
  std::vector<int32_t> prompt = {0, 1};
  EXPECT_EQ(sample_token(l.data(), 3, r, prompt, {}, 0, 0, scratch), 2);
}

// Parameters at the edge of a float (the API reads them as doubles: top_p 1e-300 or
// temperature 1e-40 are valid there): each draw is the parameter's limit, never a crash or
// NaN. top_p -> 0 keeps only the most likely id (a nucleus holds at least one); T -> 0 is the
// argmax; a repetition penalty -> 0 sends a positive seen logit to the top (finitely).
TEST(Sampler, ParametersTooSmallForAFloatSampleTheirLimit) {
  std::vector<float> l = {1.0f, 3.0f, 2.0f, -1.0f, 2.5f};
  SamplerScratch scratch;
  for (int i = 0; i < 50; ++i) {
    SamplingParams p;
    p.seed = uint64_t(i);
    p.top_p = float(1e-300);  // 0 as a float
    EXPECT_EQ(sample_token(l.data(), 5, p, {}, {}, 0, uint64_t(i), scratch), 1);
    p.top_p = 1.0f;
    p.min_p = 0.5f;
    p.temperature = 1e-40f;  // subnormal: 1/T overflows
    EXPECT_EQ(sample_token(l.data(), 5, p, {}, {}, 0, uint64_t(i), scratch), 1);
    p.temperature = 1e-30f;  // 1/T finite: exp((l - top) / T) is 1 at the top, 0 elsewhere
    EXPECT_EQ(sample_token(l.data(), 5, p, {}, {}, 0, uint64_t(i), scratch), 1);
  }
  // Repetition penalty 1e-300 (0 as a float) on the prompt's token 2 (logit 2 > 0): it goes
  // to the top, greedy or sampled; a seen negative logit goes to 0.
  SamplingParams r;
  r.repetition_penalty = float(1e-300);
  std::vector<int32_t> prompt = {2, 3};
  r.temperature = 0;
  EXPECT_EQ(sample_token(l.data(), 5, r, prompt, {}, 0, 0, scratch), 2);
  r.temperature = 1.0f;
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(sample_token(l.data(), 5, r, prompt, {}, 0, uint64_t(i), scratch), 2);
  TokenLogprob lp;
  token_logprob(l.data(), 5, r, prompt, {}, 2, 5, scratch, &lp);
  EXPECT_EQ(lp.logprob, 0.0f);  // all the mass
  ASSERT_EQ(lp.top_count, 5);
  EXPECT_EQ(lp.top[0].first, 2);
  for (int k = 1; k < 5; ++k) EXPECT_LT(lp.top[size_t(k)].second, -1e30f);  // no NaN
  // A temperature whose 1/T overflows takes the logits as they are, as greedy does.
  SamplingParams tiny;
  tiny.temperature = 1e-40f;
  token_logprob(l.data(), 5, tiny, {}, {}, 1, 0, scratch, &lp);
  EXPECT_NEAR(lp.logprob, std::log(softmax(l, 1.0)[1]), 1e-6);
}

TEST(Sampler, DrawsDependOnlyOnSeedRequestAndPosition) {
  EXPECT_EQ(counter_uniform(5, 1, 9), counter_uniform(5, 1, 9));
  EXPECT_NE(counter_uniform(5, 1, 9), counter_uniform(5, 1, 10));
  EXPECT_NE(counter_uniform(5, 1, 9), counter_uniform(6, 1, 9));
  EXPECT_NE(counter_uniform(5, 1, 9), counter_uniform(5, 2, 9));
  double mean = 0;
  for (int i = 0; i < 10000; ++i) mean += counter_uniform(3, 0, uint64_t(i)) / 10000;
  EXPECT_NEAR(mean, 0.5, 0.01);
}

TEST(Sampler, LogprobsAreTheLogSoftmaxAfterPenaltiesAndTemperature) {
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
  SamplerScratch scratch;
  auto log_softmax = [](std::vector<double> x, size_t i) {
    double z = 0;
    for (double v : x) z += std::exp(v);
    return x[i] - std::log(z);
  };
  TokenLogprob lp;
  SamplingParams greedy;
  greedy.temperature = 0;  // the logits as they are
  token_logprob(l.data(), 4, greedy, {}, {}, 1, 3, scratch, &lp);
  EXPECT_EQ(lp.token, 1);
  EXPECT_NEAR(lp.logprob, log_softmax({1, 3, 2, 3}, 1), 1e-6);
  ASSERT_EQ(lp.top_count, 3);
  EXPECT_EQ(lp.top[0].first, 1);  // ties to the lower id
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[2].second, log_softmax({1, 3, 2, 3}, 2), 1e-6);
  // Temperature 2 and a presence penalty of 1 on token 3: logits / 2 after the penalty.
  SamplingParams p;
  p.temperature = 2.0f;
  p.presence_penalty = 1.0f;
  p.top_k = 1;  // truncation does not enter
  std::vector<int32_t> gen = {3};
  token_logprob(l.data(), 4, p, {}, gen, 0, 0, scratch, &lp);
  EXPECT_NEAR(lp.logprob, log_softmax({0.5, 1.5, 1.0, 1.0}, 0), 1e-6);
  EXPECT_EQ(lp.top_count, 0);
}

// Sampling among `allowed` ids (a grammar's mask) draws the token that sampling the whole row
// with every other id at -inf draws — the definition of a masked draw — for every key, with
// greedy, top-k (below and above the allowed count), top-p, min-p, penalties and ties.
TEST(Sampler, AmongAllowedIdsIsTheDrawWithTheOthersAtMinusInfinity) {
  const int64_t V = 700;
  uint64_t x = 12345;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::vector<float> logits(V);
  for (auto& v : logits) v = float(int(next() % 400)) / 40.0f - 5.0f;  // many ties
  const std::vector<int32_t> prompt = {3, 9, 9, 41}, generated = {41, 7, 7, 7, 500};
  std::vector<SamplingParams> params(8);
  params[0].temperature = 0;
  params[1].temperature = 1;
  params[2].temperature = 0.7f;
  params[2].top_k = 5;
  params[3].temperature = 1.3f;
  params[3].top_k = 400;
  params[4].temperature = 1;
  params[4].top_p = 0.8f;
  params[5].temperature = 1;
  params[5].min_p = 0.2f;
  params[6].temperature = 0.9f;
  params[6].repetition_penalty = 1.3f;
  params[6].presence_penalty = 0.5f;
  params[6].frequency_penalty = 0.25f;
  params[6].top_k = 50;
  params[6].top_p = 0.9f;
  params[7].temperature = 0;
  params[7].repetition_penalty = 2.0f;
  SamplerScratch scratch;
  int64_t draws = 0;
  for (int density : {1, 3, 50, 97, 100}) {  // percent of ids allowed (1: a handful)
    std::vector<int32_t> allowed;
    std::vector<float> masked(V, -INFINITY);
    for (int64_t i = 0; i < V; ++i)
      if (int(next() % 100) < density || (density == 1 && allowed.empty() && i == V - 1)) {
        allowed.push_back(int32_t(i));
        masked[size_t(i)] = logits[size_t(i)];
      }
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].seed = 99 + k;
      for (uint64_t pos = 0; pos < 200; ++pos, ++draws) {
        const int32_t want =
            sample_token(masked.data(), V, params[k], prompt, generated, 5, pos, scratch);
        const int32_t got =
            sample_token(logits.data(), V, params[k], prompt, generated, 5, pos, scratch, allowed);
        ASSERT_EQ(got, want) << "density " << density << " params " << k << " position " << pos;
      }
    }
  }
  EXPECT_EQ(draws, 5 * 8 * 200);
}

}  // namespace
// A LogitAdjust is the same as changing the logits by hand: each banned id at -inf, each bias
// added, before the penalties, for every way of sampling and for the logprobs.
TEST(Sampler, LogitAdjustIsTheLogitsChangedByHand) {
  std::vector<float> l(300);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i) * 1.7) * 3.0);
  const std::vector<std::pair<int32_t, float>> bias = {{3, 5.0f}, {40, -2.0f}, {41, 100.0f}};
  const std::vector<int32_t> banned = {41, 7, 299};
  std::vector<float> by_hand = l;
  for (const auto& [t, b] : bias) by_hand[size_t(t)] += b;
  for (int32_t t : banned) by_hand[size_t(t)] = -INFINITY;
  const LogitAdjust adjust{bias, banned};
  const std::vector<int32_t> generated = {3, 3, 40, 5};
  const std::vector<int32_t> allowed = {2, 3, 7, 40, 41, 100};
  SamplerScratch scratch;
  for (int variant = 0; variant < 6; ++variant) {
    SamplingParams p;
    p.temperature = variant == 0 ? 0.0f : 0.8f;
    if (variant == 2) p.top_k = 5;
    if (variant == 3) p.top_p = 0.6f;
    if (variant == 4) p.min_p = 0.2f;
    if (variant == 5) {
      p.repetition_penalty = 1.3f;
      p.presence_penalty = 0.5f;
      p.frequency_penalty = 0.25f;
    }
    for (uint64_t pos = 0; pos < 200; ++pos) {
      const int32_t a =
          sample_token(l.data(), int64_t(l.size()), p, {}, generated, 9, pos, scratch, {}, adjust);
      EXPECT_EQ(a,
                sample_token(by_hand.data(), int64_t(l.size()), p, {}, generated, 9, pos, scratch))
          << variant << " " << pos;
      EXPECT_NE(a, 41);  // banned, however large its bias
      const int32_t b = sample_token(l.data(), int64_t(l.size()), p, {}, generated, 9, pos, scratch,
                                     allowed, adjust);
      EXPECT_EQ(b, sample_token(by_hand.data(), int64_t(l.size()), p, {}, generated, 9, pos,
                                scratch, allowed));
    }
    TokenLogprob x, y;
    token_logprob(l.data(), int64_t(l.size()), p, {}, generated, 3, 5, scratch, &x, adjust);
    token_logprob(by_hand.data(), int64_t(l.size()), p, {}, generated, 3, 5, scratch, &y);
    EXPECT_EQ(x.logprob, y.logprob);
    ASSERT_EQ(x.top_count, y.top_count);
    for (int k = 0; k < x.top_count; ++k) EXPECT_EQ(x.top[size_t(k)], y.top[size_t(k)]);
  }
}

}  // namespace fathom::engine
