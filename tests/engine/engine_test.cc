// The engine on the tiny golden checkpoint: greedy generation equals the argmax chain of the
// model's own forward; a seeded request gives the same tokens alone and among 8 concurrent
// different requests; a prefix-cache hit reports cached tokens, is exact with the window side
// objects (the default) and replays the last window with swa_bounded_replay; a small KV pool still
// gives exact answers (waiting, eviction, preemption); a cancelled request stops; bad requests are
// refused.
#include <gtest/gtest.h>

#include <chrono>
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

// The engine's stats once its step after the last event is accounted (they are updated at
// the end of a step, after the events): polls up to 10 s for no running or waiting request.
EngineStats idle_stats(const Engine& e) {
  EngineStats st = e.stats();
  for (int i = 0; i < 1000 && (st.running != 0 || st.waiting != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = e.stats();
  }
  return st;
}

// The model's own greedy chain (independent of the engine).
std::vector<int32_t> argmax_chain(const std::vector<int32_t>& p, int n) {
  const auto& m = tiny();
  auto st = m.new_sequence();
  std::vector<float> logits(1024);
  std::vector<int32_t> want;
  EXPECT_TRUE(m.forward(*st, p, logits.data(), nullptr, false).is_ok());
  for (int i = 0; i < n; ++i) {
    want.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    EXPECT_TRUE(m.forward(*st, std::span(&want.back(), 1), logits.data(), nullptr, false).is_ok());
  }
  return want;
}

GenerationRequest greedy(std::vector<int32_t> p, int n) {
  GenerationRequest r;
  r.prompt = std::move(p);
  r.sampling.temperature = 0;
  r.max_tokens = n;
  r.ignore_eos = true;
  return r;
}

TEST(Engine, PrefixHitWithWindowSideObjectsIsExact) {
  EngineOptions o;
  o.prefix_block = 16;  // the tiny model's window; several blocks in a 60-token prompt
  Engine e(tiny(), o, -1);
  GenerationRequest r = greedy(prompt(60, 3), 8);
  StreamEvent first, second;
  auto a = drain(**e.submit(r), &first);
  auto b = drain(**e.submit(r), &second);
  EXPECT_EQ(first.cached_tokens, 0);
  EXPECT_EQ(second.cached_tokens, 48);  // 3 full blocks; the last token always runs
  EXPECT_EQ(a, argmax_chain(r.prompt, 8));
  EXPECT_EQ(b, a);
  EXPECT_EQ(e.stats().replayed_tokens, 0);
  // A different salt (tenant) does not hit.
  r.cache_salt = 99;
  StreamEvent third;
  drain(**e.submit(r), &third);
  EXPECT_EQ(third.cached_tokens, 0);
}

TEST(Engine, PrefixHitWithBoundedReplayReplaysTheLastWindow) {
  EngineOptions o;
  o.prefix_block = 16;
  o.swa_bounded_replay = true;
  Engine e(tiny(), o, -1);
  // 40 tokens: a hit may cover at most 40 - 16 (window) - 6 (speculative slots) = 18
  // tokens, so one block; its replay starts at 0 and is exact.
  GenerationRequest r = greedy(prompt(40, 5), 8);
  StreamEvent first, second;
  auto a = drain(**e.submit(r), &first);
  auto b = drain(**e.submit(r), &second);
  EXPECT_EQ(second.cached_tokens, 16);
  EXPECT_EQ(a, argmax_chain(r.prompt, 8));
  EXPECT_EQ(b, a);
  EXPECT_EQ(e.stats().replayed_tokens, 16);
  // 60 tokens: at most 38, so two blocks; the replay of the second block's window is the
  // approximation (the tokens may differ from the exact chain; the request completes).
  GenerationRequest r60 = greedy(prompt(60, 3), 8);
  drain(**e.submit(r60), &first);
  auto c = drain(**e.submit(r60), &second);
  EXPECT_EQ(second.cached_tokens, 32);
  EXPECT_EQ(e.stats().replayed_tokens, 16 + 16);
  EXPECT_EQ(c.size(), 8u);
  EXPECT_EQ(second.cause, FinishCause::kLength);
}

TEST(Engine, SmallPoolEvictsCachedBlocksAndPreemptsYetEveryAnswerIsExact) {
  // A pool of a few sequences' pages: admission waits, cached blocks are evicted, running
  // sequences are preempted and recomputed; greedy answers equal the model's own chain.
  const auto& m = tiny();
  kv::PagePool probe_pool(m.page_bytes(8), 0);  // the engine's pages: 16-token blocks / ratio 2
  auto probe = m.new_sequence(&probe_pool);
  EngineOptions o;
  o.prefix_block = 16;
  o.kv_budget_bytes = 2 * m.pages_needed(*probe, 48 + 24) * m.page_bytes(8);
  Engine e(m, o, -1);
  std::vector<GenerationRequest> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(greedy(prompt(48, 10 + i), 24));
    auto s = e.submit(reqs.back());
    ASSERT_TRUE(s.is_ok());
    streams.push_back(*s);
  }
  for (int i = 0; i < 6; ++i) {
    StreamEvent last;
    EXPECT_EQ(drain(*streams[size_t(i)], &last), argmax_chain(reqs[size_t(i)].prompt, 24)) << i;
    EXPECT_EQ(last.cause, FinishCause::kLength) << last.error.to_string();
  }
  EngineStats st = e.stats();
  std::printf("pool %ld pages, %ld in use at the end, %ld preemptions, %ld cached blocks\n",
              long(st.kv_pages_total), long(st.kv_pages_used), long(st.preemptions),
              long(st.prefix_blocks));
  EXPECT_LE(st.kv_pages_used, st.kv_pages_total);
  EXPECT_GT(st.kv_pages_total, 0);
}

TEST(Engine, ConcurrentGreedyRequestsAreExactWithAndWithoutAsyncScheduling) {
  // Plans made a step ahead (async) and plans made after each step give every request the
  // model's own greedy chain, whatever the batch around it.
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(greedy(prompt(20 + 9 * i, 30 + i), 6 + 3 * i));
  for (bool async : {true, false}) {
    EngineOptions o;
    o.async_scheduling = async;
    o.max_step_tokens = 32;  // prefill spreads over several steps, beside decodes
    Engine e(tiny(), o, -1);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(*e.submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) {
      StreamEvent last;
      EXPECT_EQ(drain(*streams[i], &last), argmax_chain(reqs[i].prompt, int(reqs[i].max_tokens)))
          << "async " << async << " request " << i;
      EXPECT_EQ(last.completion_tokens, reqs[i].max_tokens);
    }
    EXPECT_EQ(idle_stats(e).running, 0);
  }
}

TEST(Engine, DecoderReplayWithATailCoveringTheDecodersReachIsExact) {
  // The tiny model's decoder layers (the last kv source's attention and the 3 after it) see
  // 4 windows of 16: a tail of 64 leaves the last prompt row and every decode step exact.
  EngineOptions o;
  o.decoder_replay_keep = 64;
  o.max_step_tokens = 40;  // the prefill crosses the tail start inside a chunk
  Engine e(tiny(), o, -1);
  GenerationRequest r = greedy(prompt(100, 7), 10);
  StreamEvent last;
  EXPECT_EQ(drain(**e.submit(r), &last), argmax_chain(r.prompt, 10));
  EXPECT_EQ(last.cause, FinishCause::kLength);
}

TEST(Engine, CancellationsAtEveryStageLeaveNothingBehind) {
  // Requests cancelled while queued, while prefilling and while decoding, beside ones that
  // run to the end, under a pool small enough to defer and preempt: every stream gets one
  // final event, the survivors their exact chains, and the engine ends empty.
  for (bool async : {true, false}) {
    const auto& m = tiny();
    kv::PagePool probe_pool(m.page_bytes(8), 0);
    auto probe = m.new_sequence(&probe_pool);
    EngineOptions o;
    o.prefix_block = 16;
    o.async_scheduling = async;
    o.max_step_tokens = 24;
    o.kv_budget_bytes = 3 * m.pages_needed(*probe, 90) * m.page_bytes(8);
    Engine e(m, o, -1);
    std::vector<GenerationRequest> reqs;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 12; ++i) {
      reqs.push_back(greedy(prompt(30 + 5 * i, 50 + i), 20));
      streams.push_back(*e.submit(reqs.back()));
    }
    streams[11]->cancel();  // most likely still queued
    StreamEvent ev;
    ASSERT_TRUE(streams[0]->next(&ev, 60000));  // the first is decoding
    streams[0]->cancel();
    streams[5]->cancel();  // queued or prefilling
    for (size_t i = 0; i < streams.size(); ++i) {
      StreamEvent last;
      std::vector<int32_t> got = drain(*streams[i], &last);
      ASSERT_TRUE(last.finished) << i;
      if (i == 0 || i == 5 || i == 11) {
        EXPECT_TRUE(last.cause == FinishCause::kCancelled || last.cause == FinishCause::kLength)
            << i;
        continue;
      }
      EXPECT_EQ(last.cause, FinishCause::kLength) << i << " " << last.error.to_string();
      EXPECT_EQ(got, argmax_chain(reqs[i].prompt, 20)) << "async " << async << " request " << i;
    }
    EngineStats st = idle_stats(e);
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(st.waiting, 0);
  }
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
