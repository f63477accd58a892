// The engine on the tiny golden checkpoint: greedy generation equals the argmax chain of the
// model's own forward; a seeded request gives the same tokens alone and among 8 concurrent
// different requests; a prefix-cache hit reports cached tokens and changes nothing; a
// cancelled request stops; bad requests are refused.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "engine/engine.h"
#include "model/v41.h"

namespace fathom::engine {
namespace {

const model::V41Model& tiny() {
  static std::unique_ptr<model::V41Model> m = [] {
    model::ModelOptions o;
    o.numerics = model::Numerics::kFast;
    auto r = model::V41Model::load(std::string(FATHOM_TEST_DATA) + "/model/v41-tiny", o);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return std::move(*r);
  }();
  return *m;
}

std::vector<int32_t> drain(RequestStream& s, StreamEvent* last) {
  std::vector<int32_t> out;
  StreamEvent ev;
  while (s.next(&ev, 60000)) {
    out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finished) {
      *last = ev;
      break;
    }
  }
  return out;
}

std::vector<int32_t> prompt(int n, int salt) {
  std::vector<int32_t> p = {0};
  for (int i = 1; i < n; ++i) p.push_back(int32_t((i * 37 + salt * 101) % 990 + 3));
  return p;
}

TEST(Engine, GreedyEqualsTheModelsArgmaxChain) {
  const auto& m = tiny();
  std::vector<int32_t> p = prompt(40, 1);
  // Independent chain: the model alone.
  auto st = m.new_sequence();
  std::vector<float> logits(1024);
  std::vector<int32_t> want;
  ASSERT_TRUE(m.forward(*st, p, logits.data(), nullptr, false).is_ok());
  for (int i = 0; i < 12; ++i) {
    int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    want.push_back(t);
    ASSERT_TRUE(m.forward(*st, std::span(&want.back(), 1), logits.data(), nullptr, false).is_ok());
  }
  Engine e(m, EngineOptions{}, -1);
  GenerationRequest r;
  r.prompt = p;
  r.sampling.temperature = 0;
  r.max_tokens = 12;
  auto s = e.submit(r);
  ASSERT_TRUE(s.is_ok());
  StreamEvent last;
  EXPECT_EQ(drain(**s, &last), want);
  EXPECT_EQ(last.cause, FinishCause::kLength);
  EXPECT_EQ(last.completion_tokens, 12);
}

TEST(Engine, SeededRequestIsTheSameAloneAndInABatch) {
  const auto& m = tiny();
  GenerationRequest r;
  r.prompt = prompt(30, 2);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1234;
  r.seeded = true;
  r.max_tokens = 16;
  r.ignore_eos = true;
  std::vector<int32_t> alone;
  {
    Engine e(m, EngineOptions{}, 1);
    auto s = e.submit(r);
    ASSERT_TRUE(s.is_ok());
    StreamEvent last;
    alone = drain(**s, &last);
  }
  ASSERT_EQ(alone.size(), 16u);
  EngineOptions small_steps;
  small_steps.max_step_tokens = 24;  // forces chunked prefill interleaved with decode
  Engine e(m, small_steps, 1);
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest o;
    o.prompt = prompt(10 + 7 * i, 10 + i);
    o.sampling.temperature = 0.8f;
    o.max_tokens = 20;
    others.push_back(*e.submit(o));
    if (i == 3) {
      auto s = e.submit(r);
      ASSERT_TRUE(s.is_ok());
      others.push_back(*s);
    }
  }
  StreamEvent last;
  std::vector<int32_t> batched = drain(*others[4], &last);
  EXPECT_EQ(batched, alone);
  for (size_t i = 0; i < others.size(); ++i)
    if (i != 4) drain(*others[i], &last);
}

TEST(Engine, PrefixCacheHitReportsCachedTokensAndChangesNothing) {
  const auto& m = tiny();
  EngineOptions o;
  o.prefix_block = 16;  // the tiny model's window; several blocks in a 60-token prompt
  Engine e(m, o, -1);
  GenerationRequest r;
  r.prompt = prompt(60, 3);
  r.sampling.temperature = 0;
  r.max_tokens = 8;
  StreamEvent first, second;
  auto a = drain(**e.submit(r), &first);
  auto b = drain(**e.submit(r), &second);
  EXPECT_EQ(first.cached_tokens, 0);
  EXPECT_EQ(second.cached_tokens, 48);  // 3 full blocks; the last token always runs
  EXPECT_EQ(a, b);
  // A different salt (tenant) does not hit.
  r.cache_salt = 99;
  StreamEvent third;
  drain(**e.submit(r), &third);
  EXPECT_EQ(third.cached_tokens, 0);
}

TEST(Engine, CancelStopsAndBadRequestsAreRefused) {
  const auto& m = tiny();
  Engine e(m, EngineOptions{}, -1);
  GenerationRequest r;
  r.prompt = prompt(20, 4);
  r.max_tokens = 100000;
  r.ignore_eos = true;
  auto s = e.submit(r);
  ASSERT_TRUE(s.is_ok());
  StreamEvent ev;
  ASSERT_TRUE((*s)->next(&ev, 60000));
  (*s)->cancel();
  StreamEvent last;
  drain(**s, &last);
  EXPECT_EQ(last.cause, FinishCause::kCancelled);
  GenerationRequest bad;
  EXPECT_FALSE(e.submit(bad).is_ok());
  bad.prompt = {5000};
  EXPECT_FALSE(e.submit(bad).is_ok());
}

}  // namespace
}  // namespace fathom::engine
