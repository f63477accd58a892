// The engine on the tiny golden checkpoint: greedy generation equals the argmax chain of the
// model's own forward; a seeded request gives the same tokens alone and among 8 concurrent
// different requests; a prefix-cache hit reports cached tokens, is exact with the window side
// objects (the default) and replays the last window with swa_bounded_replay; a small KV pool still
// gives exact answers (waiting, eviction, preemption); a cancelled request stops; bad requests are
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "engine/test_util.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "model/v41.h"
#include "runner/v41_runner.h"

namespace fathom::engine {
namespace {

using test::tiny_model;
using test::tiny_runner;

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
  const auto& m = tiny_model();
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
  Engine e(tiny_runner(), EngineOptions{}, -1);
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
  GenerationRequest r;
  r.prompt = prompt(30, 2);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1234;
  r.seeded = true;
  r.max_tokens = 16;
  r.ignore_eos = true;
  std::vector<int32_t> alone;
  {
    Engine e(tiny_runner(), EngineOptions{}, 1);
    auto s = e.submit(r);
    ASSERT_TRUE(s.is_ok());
    StreamEvent last;
    alone = drain(**s, &last);
  }
  ASSERT_EQ(alone.size(), 16u);
  EngineOptions small_steps;
  small_steps.max_step_tokens = 24;  // forces chunked prefill interleaved with decode
  Engine e(tiny_runner(), small_steps, 1);
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
  const auto& m = tiny_model();
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
  Engine e(tiny_runner(), o, -1);
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

// Requests submitted together that share a new prefix: the first computes it, the others wait
// for its blocks and resume from them (where they used to compute it beside the first), with
// the model's own greedy chain, with and without asynchronous scheduling; one that shares none
// is admitted past them.
TEST(Engine, RequestsSharingANewPrefixComputeItOnce) {
  const std::vector<int32_t> prefix = prompt(64, 5);  // 4 blocks of 16
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p = prefix;
    for (int j = 0; j < 20; ++j) p.push_back(int32_t(500 + 40 * i + j));
    reqs.push_back(greedy(p, 4));
  }
  reqs.push_back(greedy(prompt(50, 9), 4));  // shares nothing
  for (bool async : {true, false}) {
    EngineOptions o;
    o.prefix_block = 16;
    o.async_scheduling = async;
    Engine e(tiny_runner(), o, -1);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(*e.submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) {
      StreamEvent last;
      EXPECT_EQ(drain(*streams[i], &last), argmax_chain(reqs[i].prompt, 4))
          << "async " << async << " request " << i;
      // The first computes the prefix; the others resume from its 4 blocks.
      EXPECT_EQ(last.cached_tokens, i == 0 || i == 3 ? 0 : 64)
          << "async " << async << " request " << i;
    }
    EXPECT_EQ(idle_stats(e).running, 0);
  }
}

// A request that waits for another's blocks keeps its place: with two slots, the first
// request computing the shared prefix and the second waiting for it, an unrelated request
// queued behind them does not take the second's slot (it starts only once one ends).
TEST(Engine, ARequestWaitingForSharedBlocksKeepsItsPlace) {
  const std::vector<int32_t> prefix = prompt(64, 6);
  std::vector<int32_t> a = prefix, b = prefix;
  for (int j = 0; j < 20; ++j) a.push_back(int32_t(600 + j)), b.push_back(int32_t(700 + j));
  EngineOptions o;
  o.prefix_block = 16;
  o.max_running = 2;
  o.async_scheduling = false;
  Engine e(tiny_runner(), o, -1);
  auto sa = *e.submit(greedy(a, 6));
  auto sb = *e.submit(greedy(b, 6));
  auto sc = *e.submit(greedy(prompt(40, 11), 6));
  StreamEvent ev;
  ASSERT_TRUE(sc->next(&ev, 60000));  // C's first token
  StreamEvent bev;
  EXPECT_TRUE(sb->try_next(&bev)) << "B had no token when C started";
  StreamEvent last;
  drain(*sa, &last);
  EXPECT_EQ(last.cached_tokens, 0);
  drain(*sb, &last);
  EXPECT_EQ(last.cached_tokens, 64);
  drain(*sc, &last);
}

TEST(Engine, PrefixHitWithBoundedReplayReplaysTheLastWindow) {
  EngineOptions o;
  o.prefix_block = 16;
  o.swa_bounded_replay = true;
  Engine e(tiny_runner(), o, -1);
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
  const auto& m = tiny_model();
  kv::PagePool probe_pool(m.page_bytes(8), 0);  // the engine's pages: 16-token blocks / ratio 2
  auto probe = m.new_sequence(&probe_pool);
  EngineOptions o;
  o.prefix_block = 16;
  o.kv_budget_bytes = 2 * m.pages_needed(*probe, 48 + 24) * m.page_bytes(8);
  Engine e(tiny_runner(), o, -1);
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
    Engine e(tiny_runner(), o, -1);
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
  Engine e(tiny_runner(), o, -1);
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
    const auto& m = tiny_model();
    kv::PagePool probe_pool(m.page_bytes(8), 0);
    auto probe = m.new_sequence(&probe_pool);
    EngineOptions o;
    o.prefix_block = 16;
    o.async_scheduling = async;
    o.max_step_tokens = 24;
    o.kv_budget_bytes = 3 * m.pages_needed(*probe, 90) * m.page_bytes(8);
    Engine e(tiny_runner(), o, -1);
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
  Engine e(tiny_runner(), EngineOptions{}, -1);
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

// ---------------------------------------------------------------------------------------
// Exactness on a ~1,100-token prompt: every way the engine can run a request (cold or warm
// prefix cache, alone or among 8, chunked or in one chunk, planned ahead or not) gives the
// model's own chain: no cache, alone, the whole prompt in one forward, then one token at a
// time, sampled with the engine's sampler keyed by (seed, sample index, position).

// Past the window and 8 blocks; 520 (4 blocks) in the sanitizer build, which runs the same
// checks 5-10x slower.
#ifdef FATHOM_TEST_LIGHT
constexpr int kLongPrompt = 520;
#else
constexpr int kLongPrompt = 1100;
#endif
constexpr int kLongPromptHit = kLongPrompt / 128 * 128;

SamplingParams seeded_t1() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  return p;
}

GenerationRequest request(std::vector<int32_t> p, int n, const SamplingParams& sp, bool seeded) {
  GenerationRequest r;
  r.prompt = std::move(p);
  r.sampling = sp;
  r.seeded = seeded;
  r.max_tokens = n;
  r.ignore_eos = true;
  return r;
}

// The model's own chain for a request (greedy at temperature 0, else seeded sampling),
// memoised: several tests compare against the same long prompt.
std::vector<int32_t> model_chain(const GenerationRequest& r) {
  static std::map<std::tuple<std::vector<int32_t>, float, uint64_t, int32_t, int64_t>,
                  std::vector<int32_t>>
      memo;
  auto key = std::make_tuple(r.prompt, r.sampling.temperature, r.sampling.seed, r.sample_index,
                             r.max_tokens);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  const auto& m = tiny_model();
  auto st = m.new_sequence();
  std::vector<float> logits(size_t(m.config().vocab_size));
  std::vector<int32_t> out;
  SamplerScratch scratch;
  EXPECT_TRUE(m.forward(*st, r.prompt, logits.data(), nullptr, false).is_ok());
  for (int64_t i = 0; i < r.max_tokens; ++i) {
    out.push_back(sample_token(logits.data(), int64_t(logits.size()), r.sampling, r.prompt, out,
                               uint64_t(r.sample_index), uint64_t(r.prompt.size() + out.size()),
                               scratch));
    EXPECT_TRUE(m.forward(*st, std::span(&out.back(), 1), logits.data(), nullptr, false).is_ok());
  }
  memo.emplace(key, out);
  return out;
}

std::vector<int32_t> run_alone(const EngineOptions& o, const GenerationRequest& r,
                               StreamEvent* last) {
  Engine e(tiny_runner(), o, -1);
  auto s = e.submit(r);
  EXPECT_TRUE(s.is_ok());
  if (!s.is_ok()) return {};
  return drain(**s, last);
}

TEST(EngineExact, ColdAndWarmPrefixCacheGiveTheModelsChain) {
  for (bool seeded : {false, true}) {
    GenerationRequest r =
        request(prompt(kLongPrompt, 21), 10, seeded ? seeded_t1() : SamplingParams{}, seeded);
    if (!seeded) r.sampling.temperature = 0;
    Engine e(tiny_runner(), EngineOptions{}, -1);
    StreamEvent cold, warm;
    auto a = drain(**e.submit(r), &cold);
    auto b = drain(**e.submit(r), &warm);
    EXPECT_EQ(cold.cached_tokens, 0);
    EXPECT_EQ(warm.cached_tokens, kLongPromptHit);  // whole blocks of 128; the rest runs
    EXPECT_EQ(b, a) << "seeded " << seeded << ": a hit changed the output";
    EXPECT_EQ(a, model_chain(r)) << "seeded " << seeded;
    EXPECT_EQ(e.stats().replayed_tokens, 0);
  }
}

TEST(EngineExact, AloneAndAmongEightConcurrentRequestsGiveTheModelsChain) {
  for (bool seeded : {false, true}) {
    GenerationRequest r =
        request(prompt(kLongPrompt, 22), 10, seeded ? seeded_t1() : SamplingParams{}, seeded);
    if (!seeded) r.sampling.temperature = 0;
    StreamEvent last;
    const std::vector<int32_t> alone = run_alone(EngineOptions{}, r, &last);
    Engine e(tiny_runner(), EngineOptions{}, -1);
    std::vector<std::shared_ptr<RequestStream>> others;
    std::shared_ptr<RequestStream> mine;
    for (int i = 0; i < 8; ++i) {
      GenerationRequest o = request(prompt(100 + 70 * i, 60 + i), 12, seeded_t1(), false);
      o.sampling.temperature = 0.7f;
      others.push_back(*e.submit(o));
      if (i == 2) mine = *e.submit(r);
    }
    const std::vector<int32_t> among = drain(*mine, &last);
    for (auto& o : others) drain(*o, &last);
    EXPECT_EQ(among, alone) << "seeded " << seeded;
    EXPECT_EQ(alone, model_chain(r)) << "seeded " << seeded;
  }
}

TEST(EngineExact, ChunkedAndOneChunkPrefillGiveTheModelsChain) {
  for (bool seeded : {false, true}) {
    GenerationRequest r =
        request(prompt(kLongPrompt, 23), 8, seeded ? seeded_t1() : SamplingParams{}, seeded);
    if (!seeded) r.sampling.temperature = 0;
    EngineOptions chunked;
    chunked.max_step_tokens = 48;
    EngineOptions one;
    one.max_step_tokens = 4096;
    one.prefix_cache = false;
    StreamEvent last;
    const std::vector<int32_t> a = run_alone(chunked, r, &last);
    const std::vector<int32_t> b = run_alone(one, r, &last);
    EXPECT_EQ(b, model_chain(r)) << "one chunk, seeded " << seeded;
    EXPECT_EQ(a, b) << "chunked vs one chunk, seeded " << seeded;
  }
}

TEST(EngineExact, AsyncAndSyncSchedulingGiveTheModelsChain) {
  for (bool seeded : {false, true}) {
    GenerationRequest r =
        request(prompt(kLongPrompt, 24), 8, seeded ? seeded_t1() : SamplingParams{}, seeded);
    if (!seeded) r.sampling.temperature = 0;
    std::vector<int32_t> got[2];
    for (bool async : {true, false}) {
      EngineOptions o;
      o.async_scheduling = async;
      Engine e(tiny_runner(), o, -1);
      // A second request alongside, so that plans made ahead meet a changing batch.
      auto other = *e.submit(request(prompt(300, 25), 20, seeded_t1(), true));
      StreamEvent last;
      got[async] = drain(**e.submit(r), &last);
      drain(*other, &last);
    }
    EXPECT_EQ(got[1], got[0]) << "async vs sync, seeded " << seeded;
    EXPECT_EQ(got[1], model_chain(r)) << "seeded " << seeded;
  }
}

// A request's greedy tokens and their logprobs (which show any change of the logits).
struct Answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishCause cause = FinishCause::kError;
  std::string error;  // the finish event's error, if any
  bool operator==(const Answer&) const = default;
};

Answer answer(RequestStream& s) {
  Answer a;
  StreamEvent ev;
  while (s.next(&ev, 60000)) {
    a.tokens.insert(a.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    for (const TokenLogprob& lp : ev.logprobs)
      for (int k = 0; k < lp.top_count; ++k) a.logprobs.push_back(lp.top[size_t(k)].second);
    if (ev.finished) {
      a.cause = ev.cause;
      if (!ev.error.is_ok()) a.error = ev.error.to_string();
      break;
    }
  }
  return a;
}

GenerationRequest greedy_with_logprobs(std::vector<int32_t> p, int n) {
  GenerationRequest r = greedy(std::move(p), n);
  r.top_logprobs = 5;
  return r;
}

// The reference: no cache, alone, the whole prompt in one chunk.
Answer one_chunk_alone(const GenerationRequest& r) {
  EngineOptions one;
  one.max_step_tokens = 4096;
  one.prefix_cache = false;
  Engine e(tiny_runner(), one, -1);
  return answer(**e.submit(r));
}

// A prompt one token past a block boundary: its prefill ends in a one-token chunk (the
// blocks, then the last token) cold, and a prefix hit leaves that one token to run warm. The
// tiny model's ratio-2 indexers select (more than 56 visible entries) from position 114 on; a
// one-token chunk at an even position there must score the prompt row as the prefill does,
// not as a decode step does (the last published index keys).
TEST(EngineExact, OneTokenPromptChunksAtAnEvenPositionGiveTheOneChunkAnswer) {
  for (int L : {129, 257}) {
    const GenerationRequest r = greedy_with_logprobs(prompt(L, 41), 8);
    const Answer want = one_chunk_alone(r);
    EXPECT_EQ(want.tokens, model_chain(r)) << L;
    Engine e(tiny_runner(), EngineOptions{}, -1);
    const Answer cold = answer(**e.submit(r));
    const Answer warm = answer(**e.submit(r));
    EXPECT_EQ(e.stats().cached_tokens, (L - 1) / 128 * 128) << L;
    EXPECT_TRUE(cold == want) << L << ": cold, blocks then one token";
    EXPECT_TRUE(warm == want) << L << ": warm, a hit then one token";
  }
}

// The reproducer of the concurrency report (a cold prompt sent beside a warm one that is
// decoding at once): with asynchronous scheduling a request admitted beside decoding
// sequences gets 256 - decodes tokens in the plan, the executor cuts its chunk at the block
// boundary (128), and the next plan, made ahead from the first, asks for the 1 token that
// would reach 256: a one-token prompt chunk at position 128.
TEST(EngineExact, APromptAdmittedBesideADecodingSequenceGivesTheOneChunkAnswer) {
  const GenerationRequest r = greedy_with_logprobs(prompt(300, 42), 8);
  const Answer want = one_chunk_alone(r);
  for (bool async : {true, false}) {
    EngineOptions o;
    o.async_scheduling = async;
    Engine e(tiny_runner(), o, -1);
    auto other = *e.submit(greedy(prompt(40, 43), 200));
    StreamEvent ev;
    ASSERT_TRUE(other->next(&ev, 60000));  // decoding from now on
    EXPECT_TRUE(answer(**e.submit(r)) == want) << "async " << async;
    drain(*other, &ev);
  }
}

// A preempted sequence is dropped and later recomputes its prompt and the tokens it had
// generated. Those tokens first ran as decode steps (one row each: at an even position the
// tiny model's ratio-2 indexers score the last published index keys), so the recompute must
// run them the same way, not as prompt rows of a prefill. Three 100-token prompts that grow
// to 160 tokens in pools that hold a little less than two: sequences are preempted while
// they decode past position 114, and every answer (tokens, top-5 logprobs, finish) must
// equal the request's answer alone. (Before the fix, 3 of these 3 pools changed an answer.)
TEST(EngineExact, PreemptedSequencesRecomputeTheirGeneratedTokensAsDecodeSteps) {
  const auto& m = tiny_model();
  kv::PagePool probe_pool(m.page_bytes(8), 0);  // the engine's pages: 16-token blocks / ratio 2
  auto probe = m.new_sequence(&probe_pool);
  const int64_t one = m.pages_needed(*probe, 160);
  std::vector<GenerationRequest> reqs;
  std::vector<Answer> want;
  for (int i = 0; i < 3; ++i) {
    reqs.push_back(greedy_with_logprobs(prompt(100, 50 + i), 60));
    want.push_back(one_chunk_alone(reqs.back()));
    ASSERT_EQ(want.back().cause, FinishCause::kLength) << want.back().error;
  }
#ifdef FATHOM_TEST_LIGHT
  const std::vector<int64_t> pools = {one * 11 / 6};  // the sanitizer build: one of the three
#else
  const std::vector<int64_t> pools = {one * 7 / 4, one * 11 / 6, one * 23 / 12};
#endif
  for (int64_t pages : pools) {
    EngineOptions o;
    o.prefix_block = 16;
    o.kv_budget_bytes = pages * m.page_bytes(8);
    Engine e(tiny_runner(), o, -1);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) {
      auto s = e.submit(r);
      ASSERT_TRUE(s.is_ok()) << s.status().to_string();
      streams.push_back(*s);
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Answer got = answer(*streams[i]);
      EXPECT_EQ(got.tokens, want[i].tokens)
          << pages << " pages, request " << i << ": " << got.error;
      EXPECT_TRUE(got == want[i]) << pages << " pages, request " << i;
    }
    EXPECT_GT(e.stats().preemptions, 0) << pages << " pages";
  }
}

// A request moved mid-stream (the router's continuation): resume_output carries the tokens
// generated before; the engine runs them as the decode steps that made them and continues. Its
// tokens must be the rest of the uninterrupted answer — greedy and seeded (temperature 1,
// presence penalty: counted over the generated tokens, resumed ones included), from a cut
// before and after position 114 (where the tiny model's ratio-2 indexers start selecting and a
// prefill row would score differently from a decode step).
TEST(EngineExact, ResumedOutputContinuesTheUninterruptedAnswer) {
  for (bool seeded : {false, true}) {
    SamplingParams sp = seeded ? seeded_t1() : SamplingParams{};
    if (seeded) sp.presence_penalty = 0.5f;
    GenerationRequest r = request(prompt(100, 71), 40, sp, seeded);
    if (!seeded) r.sampling.temperature = 0;
    r.top_logprobs = 3;
    const Answer whole = one_chunk_alone(r);
    ASSERT_EQ(whole.cause, FinishCause::kLength) << whole.error;
    ASSERT_EQ(whole.tokens.size(), 40u);
    for (size_t cut : {size_t(5), size_t(25)}) {
      GenerationRequest rest = r;
      rest.resume_output.assign(whole.tokens.begin(), whole.tokens.begin() + long(cut));
      Engine e(tiny_runner(), EngineOptions{}, -1);
      const Answer got = answer(**e.submit(rest));
      EXPECT_EQ(got.cause, FinishCause::kLength) << got.error;
      EXPECT_EQ(got.tokens,
                std::vector<int32_t>(whole.tokens.begin() + long(cut), whole.tokens.end()))
          << (seeded ? "seeded" : "greedy") << ", cut at " << cut;
      EXPECT_EQ(got.logprobs,
                std::vector<float>(whole.logprobs.begin() + long(cut) * 3, whole.logprobs.end()));
    }
  }
  Engine e(tiny_runner(), EngineOptions{}, -1);
  GenerationRequest bad = greedy(prompt(20, 72), 4);
  bad.resume_output = {1, 2, 3, 4};
  EXPECT_EQ(e.submit(bad).status().code(), StatusCode::kInvalidArgument);  // no room left
  bad.resume_output = {1, -2};
  EXPECT_EQ(e.submit(bad).status().code(), StatusCode::kInvalidArgument);
  bad.resume_output = {1};
  EXPECT_EQ(e.submit_n(bad, 2).status().code(), StatusCode::kInvalidArgument);
}

TEST(EngineExact, SubmitNForksSamplesThatEqualEachSampleAloneAndSharePages) {
  GenerationRequest r = request(prompt(kLongPrompt, 26), 8, seeded_t1(), true);
  EngineOptions o;
  o.prefix_cache = false;  // what the n samples share is then the fork's doing alone
  std::vector<std::vector<int32_t>> got;
  int64_t peak_n = 0;
  {
    Engine e(tiny_runner(), o, -1);
    auto streams = e.submit_n(r, 4);
    ASSERT_TRUE(streams.is_ok());
    ASSERT_EQ(streams->size(), 4u);
    for (auto& s : *streams) {
      StreamEvent last;
      got.push_back(drain(*s, &last));
      EXPECT_EQ(last.cause, FinishCause::kLength);
      EXPECT_EQ(last.prompt_tokens, kLongPrompt);
    }
    peak_n = idle_stats(e).kv_pages_peak;
  }
  int64_t peak_one = 0;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest alone = r;
    alone.sample_index = i;
    Engine e(tiny_runner(), o, -1);
    StreamEvent last;
    EXPECT_EQ(drain(**e.submit(alone), &last), got[size_t(i)]) << "sample " << i;
    EXPECT_EQ(got[size_t(i)], model_chain(alone)) << "sample " << i;
    peak_one = std::max(peak_one, idle_stats(e).kv_pages_peak);
  }
  EXPECT_NE(got[0], got[1]);
  EXPECT_NE(got[1], got[2]);
  std::printf("KV pages at peak: %ld for n = 4, %ld for one sample\n", long(peak_n),
              long(peak_one));
  // 4 independent requests would hold 4x; the forks share the prompt's pages (with the light
  // build's shorter prompt the unshared window state weighs more: 68 vs 29 pages measured).
  EXPECT_LT(peak_n, (kLongPrompt > 1000 ? 2 : 3) * peak_one);
}

TEST(EngineApi, SubmitNSamplesOutliveTheirCancelledLeader) {
  // Choice 0 leads the prefill; cancelled at once, the other choices still get their chains.
  GenerationRequest r = request(prompt(300, 33), 6, seeded_t1(), true);
  for (bool async : {true, false}) {
    EngineOptions o;
    o.async_scheduling = async;
    Engine e(tiny_runner(), o, -1);
    auto streams = e.submit_n(r, 3);
    ASSERT_TRUE(streams.is_ok());
    (*streams)[0]->cancel();
    StreamEvent last;
    drain(*(*streams)[0], &last);
    EXPECT_TRUE(last.cause == FinishCause::kCancelled || last.cause == FinishCause::kLength);
    for (int i = 1; i < 3; ++i) {
      GenerationRequest alone = r;
      alone.sample_index = i;
      EXPECT_EQ(drain(*(*streams)[size_t(i)], &last), model_chain(alone)) << i;
      EXPECT_EQ(last.cause, FinishCause::kLength);
    }
    EXPECT_EQ(idle_stats(e).running, 0);
  }
  Engine e(tiny_runner(), EngineOptions{}, -1);
  EXPECT_FALSE(e.submit_n(r, 0).is_ok());
}

TEST(EngineApi, LogprobsAtTemperatureZeroAreTheLogSoftmaxOfTheModelsLogits) {
  const auto& m = tiny_model();
  GenerationRequest r = greedy(prompt(50, 27), 5);
  r.top_logprobs = 5;
  Engine e(tiny_runner(), EngineOptions{}, -1);
  auto s = *e.submit(r);
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> lps;
  StreamEvent ev;
  while (s->next(&ev, 60000)) {
    ASSERT_EQ(ev.logprobs.size(), ev.tokens.size());
    tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
    lps.insert(lps.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finished) break;
  }
  ASSERT_EQ(tokens, argmax_chain(r.prompt, 5));
  ASSERT_EQ(lps.size(), 5u);
  auto st = m.new_sequence();
  std::vector<float> logits(size_t(m.config().vocab_size));
  ASSERT_TRUE(m.forward(*st, r.prompt, logits.data(), nullptr, false).is_ok());
  for (size_t i = 0; i < tokens.size(); ++i) {
    double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (float v : logits) sum += std::exp(double(v) - mx);
    const double want = double(logits[size_t(tokens[i])]) - mx - std::log(sum);
    EXPECT_EQ(lps[i].token, tokens[i]);
    EXPECT_NEAR(lps[i].logprob, want, 1e-4) << i;
    ASSERT_EQ(lps[i].top_count, 5);
    EXPECT_EQ(lps[i].top[0].first, tokens[i]);
    EXPECT_FLOAT_EQ(lps[i].top[0].second, lps[i].logprob);
    for (int k = 1; k < 5; ++k)
      EXPECT_LE(lps[i].top[size_t(k)].second, lps[i].top[size_t(k - 1)].second);
    ASSERT_TRUE(m.forward(*st, std::span(&tokens[i], 1), logits.data(), nullptr, false).is_ok());
  }
  // Without the request, no logprobs.
  r.top_logprobs = -1;
  auto plain = *e.submit(r);
  while (plain->next(&ev, 60000)) {
    EXPECT_TRUE(ev.logprobs.empty());
    if (ev.finished) break;
  }
}

TEST(EngineApi, ReasoningBudgetForcesTheThinkEndId) {
  GenerationRequest r = greedy(prompt(40, 28), 8);
  const std::vector<int32_t> chain = argmax_chain(r.prompt, 8);
  int32_t end = 7;
  while (std::find(chain.begin(), chain.end(), end) != chain.end()) ++end;
  r.think_end_id = end;
  r.reasoning_budget = 3;
  Engine e(tiny_runner(), EngineOptions{}, -1);
  StreamEvent last;
  std::vector<int32_t> got = drain(**e.submit(r), &last);
  ASSERT_EQ(got.size(), 8u);
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + 3),
            std::vector<int32_t>(chain.begin(), chain.begin() + 3));
  EXPECT_EQ(got[3], end);
  // After the forced id the model goes on from it (teacher forcing gives the same chain).
  GenerationRequest forced = greedy(r.prompt, 8);
  forced.forced_output = {got[0], got[1], got[2], end};
  EXPECT_EQ(drain(**e.submit(forced), &last), got);
  // A budget of 0 forces the first token; a think end generated within the budget stops it.
  r.reasoning_budget = 0;
  got = drain(**e.submit(r), &last);
  EXPECT_EQ(got[0], end);
  EXPECT_EQ(std::count(got.begin(), got.end(), end), 1);
}

// The logits controls' reference: the model's own forward, the rules applied here to its
// logits (vLLM's: min_tokens and bad_words ban with -inf, then logit_bias is added; only
// allowed_token_ids may win), the argmax taken (ties to the lower id), and the output ended
// by EOS (`eos` >= 0, no ignore_eos) or a stop id as the engine ends it.
std::vector<int32_t> controlled_chain(const GenerationRequest& r, int32_t eos,
                                      std::vector<std::vector<float>>* rows = nullptr) {
  const auto& m = tiny_model();
  auto st = m.new_sequence();
  std::vector<float> logits(size_t(m.config().vocab_size));
  std::vector<int32_t> out;
  EXPECT_TRUE(m.forward(*st, r.prompt, logits.data(), nullptr, false).is_ok());
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < r.max_tokens; ++i) {
    std::vector<float> l = logits;
    if (i < r.min_tokens) {
      if (eos >= 0) l[size_t(eos)] = kNegInf;
      for (int32_t t : r.stop_ids) l[size_t(t)] = kNegInf;
    }
    for (const auto& w : r.bad_words) {
      const size_t k = w.size() - 1;
      if (k <= out.size() && std::equal(w.begin(), w.end() - 1, out.end() - ptrdiff_t(k)))
        l[size_t(w.back())] = kNegInf;
    }
    for (const auto& [t, b] : r.logit_bias) l[size_t(t)] += b;
    if (!r.allowed_token_ids.empty())
      for (size_t v = 0; v < l.size(); ++v)
        if (std::find(r.allowed_token_ids.begin(), r.allowed_token_ids.end(), int32_t(v)) ==
            r.allowed_token_ids.end())
          l[v] = kNegInf;
    if (rows) rows->push_back(l);
    out.push_back(int32_t(std::max_element(l.begin(), l.end()) - l.begin()));
    const int32_t t = out.back();
    if ((t == eos && !r.ignore_eos) ||
        std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end())
      break;
    EXPECT_TRUE(m.forward(*st, std::span(&out.back(), 1), logits.data(), nullptr, false).is_ok());
  }
  return out;
}

TEST(EngineApi, LogitControlsGiveTheReferenceChain) {
  const std::vector<int32_t> p = prompt(40, 31);
  const std::vector<int32_t> base = argmax_chain(p, 10);
  // EOS is the chain's third token, so that min_tokens has something to hold back.
  const int32_t eos = base[2];
  Engine e(tiny_runner(), EngineOptions{}, eos);
  struct Case {
    const char* what;
    std::function<void(GenerationRequest&)> set;
  };
  const std::vector<Case> cases = {
      {"logit_bias",
       [&](GenerationRequest& r) {
         r.logit_bias = {{base[0], -100.0f}, {base[3], 2.5f}, {7, 1.0f}};
       }},
      {"allowed_token_ids",
       [&](GenerationRequest& r) {
         r.allowed_token_ids = {base[1], 400, 17, base[4], base[1]};
       }},
      {"min_tokens",
       [&](GenerationRequest& r) {
         r.ignore_eos = false;
         r.stop_ids = {base[1], base[5]};
         r.min_tokens = 6;
       }},
      {"bad_words",
       [&](GenerationRequest& r) {
         r.bad_words = {{base[0], base[1]}, {base[3]}, {base[1], base[2], 5}};
       }},
      {"all",
       [&](GenerationRequest& r) {
         r.ignore_eos = false;
         r.min_tokens = 4;
         r.logit_bias = {{base[1], -3.0f}};
         r.bad_words = {{base[2]}};
         r.allowed_token_ids = {eos, base[0], base[1], base[2], base[3], 9, 600};
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    GenerationRequest r = greedy(p, 10);
    c.set(r);
    const std::vector<int32_t> want = controlled_chain(r, eos);
    EXPECT_NE(want, std::vector<int32_t>(base.begin(), base.begin() + ptrdiff_t(want.size())));
    StreamEvent last;
    EXPECT_EQ(drain(**e.submit(r), &last), want);
    EXPECT_NE(last.cause, FinishCause::kError) << last.error.message();
  }
  // Without min_tokens the first stop id ends the output at once.
  GenerationRequest stops = greedy(p, 10);
  stops.ignore_eos = false;
  stops.stop_ids = {base[1]};
  StreamEvent last;
  EXPECT_EQ(drain(**e.submit(stops), &last), std::vector<int32_t>(base.begin(), base.begin() + 2));

  // The logprobs are those of the distribution sampled: bias added, banned ids at -inf.
  GenerationRequest lp = greedy(p, 4);
  lp.logit_bias = {{base[0], -100.0f}, {base[2], 3.0f}};
  lp.bad_words = {{base[1]}};
  lp.top_logprobs = 3;
  std::vector<std::vector<float>> rows;
  const std::vector<int32_t> want = controlled_chain(lp, eos, &rows);
  auto s = *e.submit(lp);
  std::vector<TokenLogprob> lps;
  StreamEvent ev;
  while (s->next(&ev, 60000)) {
    lps.insert(lps.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finished) break;
  }
  ASSERT_EQ(lps.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const std::vector<float>& l = rows[i];
    double mx = *std::max_element(l.begin(), l.end()), sum = 0;
    for (float v : l) sum += std::exp(double(v) - mx);
    EXPECT_EQ(lps[i].token, want[i]);
    EXPECT_NEAR(lps[i].logprob, double(l[size_t(want[i])]) - mx - std::log(sum), 1e-4) << i;
    for (int k = 0; k < lps[i].top_count; ++k)
      EXPECT_NE(lps[i].top[size_t(k)].first, base[1]) << "a banned id among the top";
  }

  // Controls that leave nothing to sample fail the request there, with an error event.
  GenerationRequest none = greedy(p, 10);
  none.ignore_eos = false;
  none.allowed_token_ids = {eos};
  none.min_tokens = 2;
  std::vector<int32_t> got = drain(**e.submit(none), &last);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(last.cause, FinishCause::kError);
  EXPECT_NE(last.error.message().find("leave no token to sample"), std::string::npos);
  none.bad_words = {{base[0]}};
  none.allowed_token_ids = {base[0], base[1]};
  none.min_tokens = 0;
  got = drain(**e.submit(none), &last);
  EXPECT_EQ(last.cause, FinishCause::kLength) << last.error.message();
  EXPECT_EQ(got, controlled_chain(none, eos));

  // Refused at submission, naming the field.
  auto refused = [&](const std::function<void(GenerationRequest&)>& set, const char* field) {
    GenerationRequest r = greedy(p, 5);
    set(r);
    auto st = e.submit(r);
    ASSERT_FALSE(st.is_ok()) << field;
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.status().message().find(field), std::string::npos) << st.status().message();
  };
  refused([](GenerationRequest& r) { r.logit_bias = {{1024, 1.0f}}; }, "logit_bias");
  refused([](GenerationRequest& r) { r.logit_bias = {{-1, 1.0f}}; }, "logit_bias");
  refused([](GenerationRequest& r) { r.logit_bias = {{3, 100.5f}}; }, "logit_bias");
  refused([](GenerationRequest& r) { r.logit_bias = {{3, NAN}}; }, "logit_bias");
  refused([](GenerationRequest& r) { r.logit_bias = {{3, 1.0f}, {3, 2.0f}}; }, "logit_bias");
  refused([](GenerationRequest& r) { r.allowed_token_ids = {5, 1024}; }, "allowed_token_ids");
  refused([](GenerationRequest& r) { r.min_tokens = 6; }, "min_tokens");
  refused([](GenerationRequest& r) { r.min_tokens = -1; }, "min_tokens");
  refused([](GenerationRequest& r) { r.bad_words = {{}}; }, "bad_words");
  refused([](GenerationRequest& r) { r.bad_words = {{3, 4000}}; }, "bad_words");
  refused([](GenerationRequest& r) { r.bad_words.assign(205, {1, 2, 3, 4, 5}); }, "bad_words");
  // A resumed output the controls would not have produced.
  refused(
      [&](GenerationRequest& r) {
        r.allowed_token_ids = {base[0], 9};
        r.resume_output = {base[0], base[1]};
      },
      "allowed_token_ids");
  refused(
      [&](GenerationRequest& r) {
        r.bad_words = {{base[0], base[1]}};
        r.resume_output = {base[0], base[1], base[2]};
      },
      "bad_words");
  // A resumed output the controls allow continues the controlled chain.
  GenerationRequest resumed = greedy(p, 10);
  resumed.bad_words = {{base[0], base[1]}, {base[3]}};
  const std::vector<int32_t> full = controlled_chain(resumed, eos);
  resumed.resume_output.assign(full.begin(), full.begin() + 3);
  EXPECT_EQ(drain(**e.submit(resumed), &last), std::vector<int32_t>(full.begin() + 3, full.end()));
}

// Seeded sampling with the controls gives the same tokens alone and among other requests, with
// and without asynchronous scheduling (the controls are per row).
TEST(EngineApi, LogitControlsAreTheSameAloneAndInABatch) {
  const std::vector<int32_t> base = argmax_chain(prompt(30, 33), 4);
  GenerationRequest r = request(prompt(30, 33), 12, seeded_t1(), true);
  r.logit_bias = {{base[0], 4.0f}, {base[1], -4.0f}};
  r.bad_words = {{base[2], base[3]}, {base[0], base[0]}};
  r.min_tokens = 12;
  r.stop_ids = {base[3]};
  r.ignore_eos = false;
  for (int async : {0, 1}) {
    EngineOptions o;
    o.async_scheduling = async == 1;
    StreamEvent last;
    const std::vector<int32_t> alone = run_alone(o, r, &last);
    ASSERT_EQ(alone.size(), 12u);
    Engine e(tiny_runner(), o, -1);
    std::vector<std::shared_ptr<RequestStream>> others;
    for (int k = 0; k < 6; ++k)
      others.push_back(*e.submit(request(prompt(20 + k, 40 + k), 12, seeded_t1(), true)));
    auto mine = *e.submit(r);
    EXPECT_EQ(drain(*mine, &last), alone) << "async " << async;
    for (auto& o2 : others) drain(*o2, &last);
  }
}

TEST(EngineApi, InjectedErrorsEndWithAnErrorEvent) {
  Engine e(tiny_runner(), EngineOptions{}, -1);
  for (int64_t after : {0, 3}) {
    GenerationRequest r = greedy(prompt(30, 29), 10);
    r.inject_error_after = after;
    StreamEvent last;
    std::vector<int32_t> got = drain(**e.submit(r), &last);
    EXPECT_EQ(int64_t(got.size()), after);
    EXPECT_TRUE(last.finished);
    EXPECT_EQ(last.cause, FinishCause::kError);
    EXPECT_FALSE(last.error.is_ok());
    EXPECT_EQ(last.completion_tokens, after);
  }
  // The engine goes on serving.
  StreamEvent last;
  GenerationRequest r = greedy(prompt(30, 29), 4);
  EXPECT_EQ(drain(**e.submit(r), &last), argmax_chain(r.prompt, 4));
}

TEST(EngineApi, APromptThePoolCanNeverHoldIsRefusedAndGrowthPastItIsAnErrorEvent) {
  const auto& m = tiny_model();
  kv::PagePool probe_pool(m.page_bytes(64), 0);
  auto probe = m.new_sequence(&probe_pool);
  EngineOptions o;
  o.kv_budget_bytes = m.pages_needed(*probe, 200) * m.page_bytes(64);
  Engine e(tiny_runner(), o, -1);
  auto too_big = e.submit(greedy(prompt(kLongPrompt, 30), 4));
  ASSERT_FALSE(too_big.is_ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  // A prompt that fits, whose generation outgrows the whole pool: a final kError event.
  StreamEvent last;
  drain(**e.submit(greedy(prompt(150, 31), 2000)), &last);
  EXPECT_EQ(last.cause, FinishCause::kError);
  EXPECT_EQ(last.error.code(), StatusCode::kResourceExhausted);
  EXPECT_GT(last.completion_tokens, 0);
}

TEST(EngineApi, HealthAndContextLength) {
  Engine e(tiny_runner(), EngineOptions{}, -1);
  Engine::Health h = e.health();
  EXPECT_TRUE(h.alive);
  EXPECT_EQ(h.stalled_seconds, 0);
  StreamEvent last;
  drain(**e.submit(greedy(prompt(20, 32), 3)), &last);
  idle_stats(e);
  EXPECT_EQ(e.health().stalled_seconds, 0);
  EXPECT_EQ(e.context_length(), 65536 * 16);
  e.shutdown();
  EXPECT_FALSE(e.health().alive);
}

// --max-model-len: the context length an engine serves is the smaller of the option and the
// model's, and a request whose prompt and max_tokens exceed it is refused before it runs.
TEST(EngineApi, MaxModelLenCapsTheContext) {
  EngineOptions o;
  o.max_model_len = 64;
  Engine e(tiny_runner(), o, -1);
  EXPECT_EQ(e.context_length(), 64);
  StreamEvent last;
  auto fits = e.submit(greedy(prompt(20, 32), 44));
  ASSERT_TRUE(fits.is_ok()) << fits.status().message();
  drain(**fits, &last);
  EXPECT_EQ(last.completion_tokens, 44);
  auto over = e.submit(greedy(prompt(20, 32), 45));
  ASSERT_FALSE(over.is_ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("context length, 64"), std::string::npos)
      << over.status().message();
  o.max_model_len = int64_t(1) << 40;
  Engine big(tiny_runner(), o, -1);
  EXPECT_EQ(big.context_length(), 65536 * 16);
}

// Structured output on the tiny model with a made-up vocabulary: id % 8 spells a, b, c, ab, ca,
// x, "x y" or z; id 1 is EOS. A regex constraint yields text the regex matches, ended by EOS.
constexpr int32_t kGrammarEos = 1;

// `text` is `prefix` then lo..hi characters from [a-c] (what the regexes below accept; checked
// by hand: std::regex trips GCC 12's -Wmaybe-uninitialized under the sanitizers).
bool prefix_then_abc(const std::string& text, const std::string& prefix, size_t lo, size_t hi) {
  if (text.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t n = text.size() - prefix.size();
  if (n < lo || n > hi) return false;
  for (size_t i = prefix.size(); i < text.size(); ++i)
    if (text[i] < 'a' || text[i] > 'c') return false;
  return true;
}

std::shared_ptr<const grammar::CompiledGrammar> tiny_regex(const std::string& pattern) {
  std::vector<std::string> bytes(1024);
  const char* spell[8] = {"a", "b", "c", "ab", "ca", "x", "x y", "z"};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = spell[i % 8];
  bytes[kGrammarEos] = "";
  auto table = grammar::TokenTable::from_bytes(bytes, 1024, {kGrammarEos});
  EXPECT_TRUE(table.is_ok());
  auto g = grammar::regex_grammar(pattern);
  EXPECT_TRUE(g.is_ok());
  auto c = grammar::CompiledGrammar::compile(*g, *table);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return *c;
}

// The text of `tokens` (after the first `from` ones), EOS last and dropped; checks that the
// grammar's own matcher accepts every token and has ended.
std::string constrained_text(const grammar::CompiledGrammar& c,
                             std::shared_ptr<const grammar::CompiledGrammar> sp,
                             const std::vector<int32_t>& tokens, size_t from) {
  grammar::GrammarMatcher m(std::move(sp));
  std::string text;
  for (size_t i = from; i < tokens.size(); ++i) {
    EXPECT_TRUE(m.accept_token(tokens[i])) << "token " << i;
    if (tokens[i] != kGrammarEos) text += c.tokens().bytes(tokens[i]);
  }
  EXPECT_TRUE(m.is_terminated());
  EXPECT_EQ(tokens.back(), kGrammarEos);
  return text;
}

TEST(EngineGrammar, RegexConstrainedSamplesMatchAndStop) {
  auto c = tiny_regex("[a-c]{3,5}");
  Engine e(tiny_runner(), EngineOptions{}, kGrammarEos);
  for (int seed = 0; seed < 6; ++seed) {
    GenerationRequest r;
    r.prompt = prompt(20, 40 + seed);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = uint64_t(seed);
    r.seeded = true;
    r.max_tokens = 64;
    r.top_logprobs = 0;
    r.grammar = c;
    auto s = e.submit(r);
    ASSERT_TRUE(s.is_ok());
    StreamEvent last;
    std::vector<int32_t> out;
    StreamEvent ev;
    while ((*s)->next(&ev, 60000)) {
      out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
      for (const TokenLogprob& lp : ev.logprobs) EXPECT_TRUE(std::isfinite(lp.logprob));
      if (ev.finished) {
        last = ev;
        break;
      }
    }
    EXPECT_EQ(last.cause, FinishCause::kEos) << seed;
    const std::string text = constrained_text(*c, c, out, 0);
    EXPECT_TRUE(prefix_then_abc(text, "", 3, 5)) << text;
  }
  // ignore_eos: generation still ends when the grammar has (nothing may follow its EOS).
  {
    GenerationRequest r;
    r.prompt = prompt(20, 49);
    r.max_tokens = 64;
    r.ignore_eos = true;
    r.grammar = c;
    StreamEvent last;
    const std::vector<int32_t> out = drain(**e.submit(r), &last);
    EXPECT_EQ(last.cause, FinishCause::kEos);
    EXPECT_TRUE(prefix_then_abc(constrained_text(*c, c, out, 0), "", 3, 5));
  }
  // Greedy too, and n samples forked from one prefill: each with its own matcher.
  GenerationRequest r;
  r.prompt = prompt(20, 50);
  r.sampling.temperature = 0.7f;
  r.max_tokens = 64;
  r.grammar = c;
  auto streams = e.submit_n(r, 3);
  ASSERT_TRUE(streams.is_ok());
  for (auto& st : *streams) {
    StreamEvent last;
    const std::vector<int32_t> out = drain(*st, &last);
    EXPECT_EQ(last.cause, FinishCause::kEos);
    EXPECT_TRUE(prefix_then_abc(constrained_text(*c, c, out, 0), "", 3, 5));
  }
}

// A resumed output (the router's continuation, or a client's) must be one the grammar
// allows: the engine replays it into the matcher, and a token the matcher refused would leave
// it behind the text, so that what follows need not match. Such a request is refused, naming
// the token; so is one whose output already completed the grammar.
// The grammar outranks min_tokens: where the output must end (only EOS allowed), the ban is
// lifted and it ends there, a match, instead of failing; before that, EOS is held back
// (so the longest match, 5 letters, is taken).
TEST(EngineGrammar, MinTokensPastTheGrammarsEndEndsWithIt) {
  auto c = tiny_regex("[a-c]{3,5}");
  Engine e(tiny_runner(), EngineOptions{}, kGrammarEos);
  for (int seed = 0; seed < 4; ++seed) {
    GenerationRequest r;
    r.prompt = prompt(20, 60 + seed);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = uint64_t(seed);
    r.seeded = true;
    r.max_tokens = 40;
    r.min_tokens = 30;
    r.grammar = c;
    StreamEvent last;
    const std::vector<int32_t> out = drain(**e.submit(r), &last);
    EXPECT_EQ(last.cause, FinishCause::kEos) << seed << " " << last.error.message();
    const std::string text = constrained_text(*c, c, out, 0);
    EXPECT_TRUE(prefix_then_abc(text, "", 5, 5)) << text;
  }
}

TEST(EngineGrammar, ResumedOutputIsCheckedAgainstTheGrammar) {
  auto c = tiny_regex("[a-c]{3,5}");
  Engine e(tiny_runner(), EngineOptions{}, kGrammarEos);
  GenerationRequest r;
  r.prompt = prompt(20, 45);
  r.max_tokens = 64;
  r.grammar = c;
  // "a", "b" (id 9; 1 is EOS) then the rest: the whole output matches.
  r.resume_output = {0, 9};
  auto s = e.submit(r);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  StreamEvent last;
  std::vector<int32_t> out = r.resume_output;
  const std::vector<int32_t> rest = drain(**s, &last);
  out.insert(out.end(), rest.begin(), rest.end());
  EXPECT_EQ(last.cause, FinishCause::kEos);
  EXPECT_TRUE(prefix_then_abc(constrained_text(*c, c, out, 0), "ab", 1, 3));
  // "a", "x": refused at token 1.
  r.resume_output = {0, 5};
  auto bad = e.submit(r);
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("token 1 (id 5)"), std::string::npos)
      << bad.status().to_string();
  // "ab", "ca", "ab": six letters, one too many.
  r.resume_output = {3, 4, 3};
  EXPECT_EQ(e.submit(r).status().code(), StatusCode::kInvalidArgument);
  // "abc" and the grammar's EOS (with ignore_eos, which the server allows): it has ended.
  r.ignore_eos = true;
  r.resume_output = {0, 9, 2, kGrammarEos};
  bad = e.submit(r);
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("completed its grammar"), std::string::npos);
  // A grammar that starts after </think> (id 7) asks nothing of the reasoning before it.
  r.grammar_after_think = true;
  r.think_end_id = 7;
  r.resume_output = {5, 6, 7, 0};  // "x", "x y", </think>, "a"
  EXPECT_TRUE(e.submit(r).is_ok());
  r.resume_output = {5, 7, 5};  // "x" after </think>
  bad = e.submit(r);
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("token 2 (id 5)"), std::string::npos);
}

TEST(EngineGrammar, ConstraintStartsAfterThinkEndAndFollowsForcedTokens) {
  auto c = tiny_regex("ab[a-c]{2,6}");
  Engine e(tiny_runner(), EngineOptions{}, kGrammarEos);
  GenerationRequest r;
  r.prompt = prompt(20, 60);
  r.sampling.temperature = 1.0f;
  r.max_tokens = 64;
  // Unseeded: without this a sampled reasoning token is EOS now and then (1 run in 300 on
  // the avx512bf16 path), which ends the request before the constraint starts.
  r.ignore_eos = true;
  r.grammar = c;
  r.grammar_after_think = true;
  r.think_end_id = 7;             // spelled "z" in the table; the grammar never sees it
  r.reasoning_budget = 5;         // 5 free tokens, then think_end_id, then the constraint
  r.forced_output = {13, 21, 5};  // free reasoning forced too (z, ca, x)
  auto s = e.submit(r);
  ASSERT_TRUE(s.is_ok());
  StreamEvent last;
  const std::vector<int32_t> out = drain(**s, &last);
  EXPECT_EQ(last.cause, FinishCause::kEos);
  // The reasoning ends at think_end_id: forced at index 5 when the budget runs out, or at a
  // free token (index 3 or 4) that sampled it (about 1 run in 300).
  const auto think_end = std::find(out.begin() + 3, out.end(), 7);
  ASSERT_NE(think_end, out.end());
  const size_t answer = size_t(think_end - out.begin()) + 1;
  EXPECT_LE(answer, 6u);
  ASSERT_GT(out.size(), answer);
  EXPECT_TRUE(prefix_then_abc(constrained_text(*c, c, out, answer), "ab", 2, 6));
  // Forced tokens inside the constraint are fed to the matcher: "ab" forced, then sampled.
  GenerationRequest f;
  f.prompt = prompt(20, 61);
  f.max_tokens = 64;
  f.grammar = c;
  f.forced_output = {3, 8};  // "ab", "a"
  StreamEvent flast;
  const std::vector<int32_t> fout = drain(**e.submit(f), &flast);
  EXPECT_EQ(flast.cause, FinishCause::kEos);
  EXPECT_TRUE(prefix_then_abc(constrained_text(*c, c, fout, 0), "ab", 2, 6));
}

TEST(EngineGrammar, PreemptedSequencesRebuildTheirMatchers) {
  // Long constrained outputs under a pool small enough to preempt: seeded samples equal the
  // same requests run alone (the rebuilt matcher masks exactly as the original did).
  const auto& m = tiny_model();
  auto c = tiny_regex("[a-c]{40,44}");
  kv::PagePool probe_pool(m.page_bytes(8), 0);
  auto probe = m.new_sequence(&probe_pool);
  EngineOptions o;
  o.prefix_block = 16;
  o.kv_budget_bytes = 2 * m.pages_needed(*probe, 48 + 24) * m.page_bytes(8);
  Engine small(tiny_runner(), o, kGrammarEos), big(tiny_runner(), EngineOptions{}, kGrammarEos);
  std::vector<GenerationRequest> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r;
    r.prompt = prompt(48, 70 + i);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = uint64_t(100 + i);
    r.seeded = true;
    r.max_tokens = 80;
    r.grammar = c;
    reqs.push_back(r);
    streams.push_back(*small.submit(r));
  }
  for (int i = 0; i < 6; ++i) {
    StreamEvent last, alone_last;
    const std::vector<int32_t> out = drain(*streams[size_t(i)], &last);
    EXPECT_EQ(last.cause, FinishCause::kEos) << i;
    EXPECT_TRUE(prefix_then_abc(constrained_text(*c, c, out, 0), "", 40, 44));
    EXPECT_EQ(out, drain(**big.submit(reqs[size_t(i)]), &alone_last)) << i;
  }
  EXPECT_GT(small.stats().preemptions, 0);
}

// ---------------------------------------------------------------------------------------
// Speculative decoding (DSpark): a draft token is kept while it equals the token the request
// samples at its position, so the output is the output without speculation.

// The draft stages replaced by an oracle (a test double for the drafter alone; the target,
// the verify rows and the undo are the real ones): it drafts the continuation `chain` of a
// `prompt_len`-token prompt, with every draft at a chain index divisible by `wrong` altered.
class OracleDrafter : public fathom::runner::V41Runner {
 public:
  OracleDrafter(const model::V41Model& m, int64_t prompt_len, std::vector<int32_t> chain, int wrong)
      : V41Runner(m), prompt_len_(prompt_len), chain_(std::move(chain)), wrong_(wrong) {}
  Status draft(RunnerSequence& s, int32_t, std::vector<int32_t>* drafts,
               std::vector<float>* confidence) const override {
    // The sequence's next token is chain[position - prompt_len]; the drafts follow it (a
    // sequence of another prompt gets drafts that are all wrong or past the chain).
    const int64_t next = position(s) - prompt_len_ + 1;
    drafts->clear();
    for (int64_t i = next; i < next + draft_block_size(); ++i) {
      int32_t t = i >= 0 && i < int64_t(chain_.size()) ? chain_[size_t(i)] : 7;
      if (i % wrong_ == 0) t = (t + 1) % 1024;
      drafts->push_back(t);
    }
    confidence->assign(drafts->size(), 0.0f);
    return Status::ok();
  }
  std::vector<Status> draft_each(std::span<RunnerSequence* const> states,
                                 std::span<const int32_t> main_tokens,
                                 std::span<std::vector<int32_t>> drafts,
                                 std::span<std::vector<float>> confidence) const override {
    std::vector<Status> out;
    for (size_t i = 0; i < states.size(); ++i)
      out.push_back(draft(*states[i], main_tokens[i], &drafts[i], &confidence[i]));
    return out;
  }

 private:
  int64_t prompt_len_;
  std::vector<int32_t> chain_;
  int wrong_;
};

TEST(EngineSpeculative, OracleDraftsAreKeptUntilTheFirstWrongOneAndChangeNothing) {
  for (bool seeded : {false, true}) {
    GenerationRequest r =
        request(prompt(150, 61), 40, seeded ? seeded_t1() : SamplingParams{}, seeded);
    if (!seeded) r.sampling.temperature = 0;
    r.top_logprobs = 3;
    const std::vector<int32_t> chain = model_chain(r);
    OracleDrafter oracle(tiny_model(), int64_t(r.prompt.size()), chain, 4);
    const Answer plain = answer(**Engine(tiny_runner(), EngineOptions{}, -1).submit(r));
    EngineOptions o;
    o.speculative_tokens = 5;
    Engine e(oracle, o, -1);
    // Beside two requests whose drafts are all wrong (the oracle knows another prompt).
    auto other1 = *e.submit(request(prompt(90, 62), 30, seeded_t1(), true));
    const Answer got = answer(**e.submit(r));
    auto other2 = *e.submit(greedy(prompt(120, 63), 25));
    StreamEvent last;
    drain(*other1, &last);
    drain(*other2, &last);
    EXPECT_EQ(got.tokens, chain) << "seeded " << seeded;
    EXPECT_TRUE(got == plain) << "seeded " << seeded << ": tokens, logprobs and finish";
    EXPECT_EQ(got.cause, FinishCause::kLength);
    const EngineStats st = idle_stats(e);
    std::printf("seeded %d: %ld speculative steps, %ld drafts verified, %ld accepted\n", seeded,
                long(st.spec_steps), long(st.spec_verified_tokens), long(st.spec_accepted_tokens));
    // Every fourth chain index is wrong: runs of up to 3 accepted drafts.
    EXPECT_GT(st.spec_accepted_tokens, 20);
    EXPECT_LT(st.spec_accepted_tokens, st.spec_verified_tokens);
    EXPECT_EQ(st.spec_accepted_hist[4] + st.spec_accepted_hist[5], 0);
  }
}

// Drafts verified under the logits controls: each verify row is sampled as the decode step
// would be (the bans follow the drafts accepted before it), so the output is the controlled
// chain, and drafts that equal it are accepted.
TEST(EngineSpeculative, LogitControlsApplyToEveryVerifiedRow) {
  GenerationRequest r = greedy(prompt(150, 64), 30);
  const std::vector<int32_t> base = argmax_chain(r.prompt, 6);
  r.bad_words = {{base[0], base[1]}, {base[3]}};
  r.logit_bias = {{base[4], -2.0f}, {11, 1.5f}};
  r.min_tokens = 20;
  r.stop_ids = {base[5]};
  r.ignore_eos = false;
  const std::vector<int32_t> want = controlled_chain(r, -1);
  ASSERT_EQ(want.size(), 30u);
  OracleDrafter oracle(tiny_model(), int64_t(r.prompt.size()), want, 4);
  EngineOptions o;
  o.speculative_tokens = 5;
  Engine e(oracle, o, -1);
  StreamEvent last;
  EXPECT_EQ(drain(**e.submit(r), &last), want);
  EXPECT_GT(idle_stats(e).spec_accepted_tokens, 10);
}

TEST(EngineSpeculative, RealDraftStagesChangeNothingAloneOrAmongOthers) {
  std::vector<GenerationRequest> reqs;
#ifdef FATHOM_TEST_LIGHT
  const int requests = 3;  // the sanitizer build
#else
  const int requests = 6;
#endif
  for (int i = 0; i < requests; ++i) {
    const bool seeded = i % 2 == 1;
    reqs.push_back(request(prompt(60 + 30 * i, 70 + i), 12 + 3 * i,
                           seeded ? seeded_t1() : SamplingParams{}, seeded));
    if (!seeded) reqs.back().sampling.temperature = 0;
    reqs.back().top_logprobs = 2;
  }
  // A stop id: the request ends at its first occurrence, speculative or not.
  reqs[2].stop_ids = {model_chain(reqs[2])[5]};
  std::vector<Answer> plain;
  {
    Engine e(tiny_runner(), EngineOptions{}, -1);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(*e.submit(r));
    for (auto& s : streams) plain.push_back(answer(*s));
  }
  const DraftSchedule kinds[] = {DraftSchedule::kFixed, DraftSchedule::kFixed,
                                 DraftSchedule::kPrefix, DraftSchedule::kStaleGlobal};
  const char* names[] = {"fixed", "fixed", "prefix", "stale-global"};
  for (int variant = 0; variant < 4; ++variant) {
    // Alone and together with the fixed scheduler; together with the prefix and stale-global
    // schedulers (their choices depend on the pass costs measured on this machine, the output
    // must not).
    const bool together = variant > 0;
    EngineOptions o;
    o.speculative_tokens = 5;
    o.speculative_schedule = kinds[variant];
    Engine e(tiny_runner(), o, -1);
    std::vector<Answer> got;
    if (together) {
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (const auto& r : reqs) streams.push_back(*e.submit(r));
      for (auto& s : streams) got.push_back(answer(*s));
    } else {
      for (const auto& r : reqs) got.push_back(answer(**e.submit(r)));
    }
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_TRUE(got[i] == plain[i]) << "request " << i << (together ? " among others" : " alone");
    EXPECT_EQ(got[2].cause, FinishCause::kStopToken);
    const EngineStats st = idle_stats(e);
    std::printf("%s, %s: %ld speculative steps, %ld drafts verified, %ld accepted\n",
                together ? "together" : "alone", names[variant], long(st.spec_steps),
                long(st.spec_verified_tokens), long(st.spec_accepted_tokens));
    // The K chosen per sequence step that drafted add up to the drafts verified, never more
    // than the stages proposed (all of them with the fixed scheduler).
    int64_t chosen = 0;
    for (size_t k = 0; k < st.spec_chosen_hist.size(); ++k)
      chosen += int64_t(k) * st.spec_chosen_hist[k];
    EXPECT_EQ(chosen, st.spec_verified_tokens);
    EXPECT_GE(st.spec_draft_tokens, st.spec_verified_tokens);
    if (variant < 2) {
      EXPECT_EQ(st.spec_draft_tokens, st.spec_verified_tokens);
    }
    if (variant >= 2) {
      // Verify calls of 1..6 rows, and passes of 2, 4 and 8 sequences verifying 6 rows each.
      ASSERT_EQ(st.spec_cost.size(), 9u);
      EXPECT_EQ(st.spec_cost[8].rows, 48);
      // Drafting for 1, 2, 4 and 8 sequences.
      ASSERT_EQ(st.spec_draft_cost.size(), 4u);
      EXPECT_EQ(st.spec_draft_cost[3].rows, 8);
    } else {
      EXPECT_GT(st.spec_steps, 0);
    }
  }
}

// With a grammar (drafts the mask rejects are never accepted), n samples forked from one
// prefill (each its own speculative sequence) and seeded sampling: unchanged by speculation.
TEST(EngineSpeculative, GrammarConstrainedAndForkedSamplesAreUnchanged) {
  auto c = tiny_regex("[a-c]{3,9}");
  auto run = [&](int64_t drafts) {
    EngineOptions o;
    o.speculative_tokens = drafts;
    Engine e(tiny_runner(), o, kGrammarEos);
    std::vector<Answer> out;
    for (int seed = 0; seed < 4; ++seed) {
      GenerationRequest r = request(prompt(30, 80 + seed), 40, seeded_t1(), true);
      r.sampling.seed = uint64_t(seed);
      r.top_logprobs = 1;
      if (seed % 2 == 0) r.grammar = c;
      auto streams = e.submit_n(r, 2);
      EXPECT_TRUE(streams.is_ok());
      for (auto& st : *streams) out.push_back(answer(*st));
    }
    return out;
  };
  const std::vector<Answer> plain = run(0), spec = run(5);
  ASSERT_EQ(plain.size(), spec.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(spec[i] == plain[i]) << i;
}

// A step's grammar masks are computed by the mask worker beside the forward — a speculative
// step's verify rows too, after each draft the grammar takes — and the tokens, logprobs and
// ends are those of masks computed one at a time before each token is sampled.
TEST(EngineGrammar, MasksComputedBesideTheForwardChangeNothing) {
  auto c = tiny_regex("[a-c]{30,40}");
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r = request(prompt(40 + 10 * i, 90 + i), 64, seeded_t1(), true);
    r.sampling.seed = uint64_t(i);
    r.top_logprobs = 2;
    r.grammar = c;
    reqs.push_back(r);
  }
  auto run = [&](const ModelRunner& mr, bool ahead, int64_t drafts, EngineStats* st) {
    EngineOptions o;
    o.grammar_masks_ahead = ahead;
    o.speculative_tokens = drafts;
    Engine e(mr, o, kGrammarEos);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(*e.submit(r));
    std::vector<Answer> out;
    for (auto& s : streams) out.push_back(answer(*s));
    *st = idle_stats(e);
    return out;
  };
  EngineStats inline_st, ahead_st, spec_st;
  const std::vector<Answer> one_at_a_time = run(tiny_runner(), false, 0, &inline_st);
  const std::vector<Answer> ahead = run(tiny_runner(), true, 0, &ahead_st);
  // Request 0 drafted by an oracle that knows its answer, every fourth draft wrong.
  OracleDrafter oracle(tiny_model(), int64_t(reqs[0].prompt.size()), one_at_a_time[0].tokens, 4);
  const std::vector<Answer> spec = run(oracle, true, 5, &spec_st);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(one_at_a_time[i].cause, FinishCause::kEos) << i;
    EXPECT_TRUE(prefix_then_abc(constrained_text(*c, c, one_at_a_time[i].tokens, 0), "", 30, 40));
    EXPECT_TRUE(ahead[i] == one_at_a_time[i]) << i;
    EXPECT_TRUE(spec[i] == one_at_a_time[i]) << i << " speculative";
  }
  EXPECT_GT(inline_st.grammar_masks, 100);
  EXPECT_EQ(inline_st.grammar_masks_ahead, 0);
  EXPECT_EQ(ahead_st.grammar_masks, inline_st.grammar_masks);
  EXPECT_EQ(ahead_st.grammar_masks_ahead, ahead_st.grammar_masks);
  EXPECT_EQ(spec_st.grammar_masks, inline_st.grammar_masks);
  EXPECT_EQ(spec_st.grammar_masks_ahead, spec_st.grammar_masks);
  EXPECT_GT(spec_st.spec_accepted_tokens, 10);
  std::printf("%ld masked tokens; speculative: %ld drafts verified, %ld accepted\n",
              long(inline_st.grammar_masks), long(spec_st.spec_verified_tokens),
              long(spec_st.spec_accepted_tokens));
}

// Jump-forward (opt-in): text the grammar forces is emitted without sampling, in one exact
// multi-row forward with the next token. The output follows the grammar, and the rows of a
// jump are the decode steps' own: a run that teacher-forces the same tokens one decode step at
// a time gives the jump's tokens the same logprobs, and samples the same token after it with
// the same logprob.
TEST(EngineGrammar, JumpForwardEmitsForcedTextAsExactDecodeSteps) {
  auto c = tiny_regex("(ab){4}[a-c]{1,3}(xz){2}");
  EngineOptions o;
  o.grammar_jump_forward = true;
  Engine jump(tiny_runner(), o, kGrammarEos), plain(tiny_runner(), EngineOptions{}, kGrammarEos);
  for (int seed = 0; seed < 3; ++seed) {
    GenerationRequest r = request(prompt(30, 100 + seed), 40, seeded_t1(), true);
    r.sampling.seed = uint64_t(seed);
    r.top_logprobs = 1;
    r.grammar = c;
    const Answer a = answer(**jump.submit(r));
    ASSERT_EQ(a.cause, FinishCause::kEos) << seed;
    const std::string text = constrained_text(*c, c, a.tokens, 0);
    ASSERT_GE(text.size(), 13u);
    EXPECT_EQ(text.substr(0, 8), "abababab");
    EXPECT_EQ(text.substr(text.size() - 4), "xzxz");
    EXPECT_TRUE(prefix_then_abc(text.substr(0, text.size() - 4), "abababab", 1, 3)) << text;
    // The first token is sampled (it ends the prefill step); the rest of "abababab" is the
    // jump; the token after it (index `after`) is sampled from the jump's last row.
    size_t after = 0, bytes = 0;
    while (bytes < 8) bytes += c->tokens().bytes(a.tokens[after++]).size();
    ASSERT_EQ(bytes, 8u);
    ASSERT_GE(after, 4u);  // "b" or "ab" after the first token, then "ab"s
    GenerationRequest all = r;
    all.forced_output = a.tokens;
    const Answer forced = answer(**plain.submit(all));
    ASSERT_EQ(forced.tokens, a.tokens);
    for (size_t p = 1; p < after; ++p) EXPECT_EQ(forced.logprobs[p], a.logprobs[p]) << p;
    GenerationRequest upto = r;
    upto.forced_output.assign(a.tokens.begin(), a.tokens.begin() + std::ptrdiff_t(after));
    upto.max_tokens = int64_t(after) + 1;
    const Answer next = answer(**plain.submit(upto));
    ASSERT_EQ(next.tokens.size(), after + 1);
    EXPECT_EQ(next.tokens[after], a.tokens[after]) << seed;
    EXPECT_EQ(next.logprobs[after], a.logprobs[after]) << seed;
  }
  const EngineStats st = idle_stats(jump);
  std::printf("%ld jump-forward steps, %ld tokens\n", long(st.grammar_jump_steps),
              long(st.grammar_jump_tokens));
  EXPECT_GE(st.grammar_jump_steps, 6);  // "abababab" and "xzxz" (or "zxz") in each
  EXPECT_GE(st.grammar_jump_tokens, 3 * (3 + 3));
  EXPECT_GT(st.grammar_masks, 0);
  EXPECT_EQ(st.grammar_masks_ahead, st.grammar_masks);  // the token after a jump's too
  EXPECT_EQ(idle_stats(plain).grammar_jump_tokens, 0);
}

}  // namespace
}  // namespace fathom::engine
