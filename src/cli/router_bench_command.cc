// `fathom bench router`: the cache-aware routing policy's cost at scale, one JSON line —
// the index filled with `--blocks` prompt blocks spread over `--replicas` replicas (multi-turn
// sessions: each prompt extends its session's last one), then the routing decision (pick())
// timed for prompts half of which extend an indexed session and half are new, with random
// loads: `pick_us_p50`, `pick_us_p99`; and the index's update rate while filling it
// (`index_block_updates_per_s`: prompt blocks hashed and recorded per second). Then the exact,
// event-fed index (router/kv_index.h) as the replicas' KV events build it: the same sessions'
// blocks arrive as one-block stored events (`event_apply_per_s`: events applied to the policy
// per second, single thread, the hashing done by the replicas and not timed), then as many
// steady-state events (a removal of an old block and a store of a new one, as eviction under a
// full cache makes them: `steady_event_apply_per_s`), and the decision timed again over the exact
// view (`exact_pick_us_p50`, `exact_pick_us_p99`).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "cli/commands.h"
#include "kv/kv_event_log.h"
#include "router/routing_policy.h"

namespace fathom::cli {
namespace {

struct BenchRouterArgs {
  int replicas = 64;
  int64_t blocks = 1 << 20;
  int prompt_blocks = 16;  // a session's turn: 2,048 tokens
  int picks = 20000;
};

int run_bench_router(const BenchRouterArgs& a) {
  router::RoutingOptions o{router::Policy::kCacheAware};
  o.max_blocks_per_replica = a.blocks;  // nothing forgotten while filling
  router::RoutingPolicy p(size_t(a.replicas), o);
  std::mt19937_64 rng(7);
  const size_t bt = 128;
  // Sessions: a first turn of random ids; each later turn is the last one plus one block.
  struct Session {
    std::vector<int32_t> ids;
    size_t replica;
  };
  std::vector<Session> sessions;
  int64_t filled = 0, updates = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (filled < a.blocks) {
    if (sessions.empty() || rng() % 4 == 0) {
      Session s;
      s.ids.resize(size_t(a.prompt_blocks) * bt);
      for (auto& t : s.ids) t = int32_t(rng() % 129280);
      s.replica = size_t(rng() % uint64_t(a.replicas));
      sessions.push_back(std::move(s));
      p.routed(sessions.back().replica, sessions.back().ids, 0);
      filled += a.prompt_blocks;
      updates += a.prompt_blocks;
    } else {
      Session& s = sessions[size_t(rng() % sessions.size())];
      for (size_t i = 0; i < bt; ++i) s.ids.push_back(int32_t(rng() % 129280));
      p.routed(s.replica, s.ids, 0);
      filled += 1;  // one new block; the rest were indexed already (refreshed)
      updates += int64_t(s.ids.size() / bt);
    }
  }
  const double fill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t indexed = 0;
  for (int r = 0; r < a.replicas; ++r) indexed += p.indexed_blocks(size_t(r));
  std::vector<router::Candidate> cands(size_t(a.replicas));
  std::vector<double> us;
  us.reserve(size_t(a.picks));
  int64_t hits = 0;
  std::vector<int32_t> fresh(size_t(a.prompt_blocks) * bt);
  for (int i = 0; i < a.picks; ++i) {
    for (size_t r = 0; r < cands.size(); ++r)
      cands[r] = {r, int64_t(rng() % 8)};  // a balanced fleet: no imbalance override
    const std::vector<int32_t>* prompt = nullptr;
    if (i % 2 == 0) {
      prompt = &sessions[size_t(rng() % sessions.size())].ids;
    } else {
      for (auto& t : fresh) t = int32_t(rng() % 129280);
      prompt = &fresh;
    }
    const auto s = std::chrono::steady_clock::now();
    const router::Choice c = p.pick(*prompt, 0, cands);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
    hits += c.predicted_hit_blocks > 0;
  }
  std::sort(us.begin(), us.end());

  // The exact index: every replica event-fed (an empty snapshot), the sessions' blocks as
  // one-block stored events, in session order (a chain's blocks in order, as a replica stores
  // them).
  router::RoutingPolicy e(size_t(a.replicas), o);
  for (int r = 0; r < a.replicas; ++r) e.load_snapshot(size_t(r), kv::KvSnapshot{});
  std::vector<std::pair<size_t, kv::KvEvent>> events;
  events.reserve(size_t(filled));
  uint64_t id = 0;
  for (const Session& s : sessions) {
    uint64_t parent = 0;
    for (uint64_t h : e.block_hashes(s.ids, 0)) {
      kv::KvEvent ev;
      ev.id = ++id;
      ev.kind = kv::KvEventKind::kStored;
      ev.parent = parent;
      ev.hashes = {h};
      events.emplace_back(s.replica, std::move(ev));
      parent = h;
    }
  }
  auto apply_all = [&](const std::vector<std::pair<size_t, kv::KvEvent>>& evs) {
    const auto t = std::chrono::steady_clock::now();
    for (const auto& [r, ev] : evs) e.apply_event(r, ev);
    return double(evs.size()) /
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const double fill_rate = apply_all(events);
  int64_t exact_indexed = 0;
  for (int r = 0; r < a.replicas; ++r) exact_indexed += e.indexed_blocks(size_t(r));
  // Steady state: each stored block evicts the oldest one of its replica's.
  std::vector<std::pair<size_t, kv::KvEvent>> steady;
  steady.reserve(events.size());
  for (size_t i = 0; i + 1 < events.size() && steady.size() + 2 <= events.size(); ++i) {
    kv::KvEvent rm;
    rm.id = ++id;
    rm.kind = kv::KvEventKind::kRemoved;
    rm.hashes = events[i].second.hashes;
    steady.emplace_back(events[i].first, std::move(rm));
    kv::KvEvent st;
    st.id = ++id;
    st.kind = kv::KvEventKind::kStored;
    st.hashes = {rng()};
    steady.emplace_back(events[i].first, std::move(st));
  }
  const double steady_rate = apply_all(steady);
  // Undo the steady phase's churn for the picks: the sessions' blocks are all back.
  for (const auto& [r, ev] : events) e.apply_event(r, ev);
  std::vector<double> eus;
  eus.reserve(size_t(a.picks));
  int64_t exact_hits = 0;
  for (int i = 0; i < a.picks; ++i) {
    for (size_t r = 0; r < cands.size(); ++r) cands[r] = {r, int64_t(rng() % 8)};
    const std::vector<int32_t>* prompt = nullptr;
    if (i % 2 == 0) {
      prompt = &sessions[size_t(rng() % sessions.size())].ids;
    } else {
      for (auto& t : fresh) t = int32_t(rng() % 129280);
      prompt = &fresh;
    }
    const auto s = std::chrono::steady_clock::now();
    const router::Choice c = e.pick(*prompt, 0, cands);
    eus.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
    exact_hits += c.predicted_hit_blocks > 0;
  }
  std::sort(eus.begin(), eus.end());
  auto p50 = [](const std::vector<double>& v) { return v[v.size() / 2]; };
  auto p99 = [](const std::vector<double>& v) {
    return v[std::min(v.size() - 1, v.size() * 99 / 100)];
  };
  std::printf(
      "{\"replicas\":%d,\"indexed_blocks\":%lld,\"sessions\":%zu,"
      "\"index_block_updates_per_s\":%.0f,\"picks\":%d,\"pick_us_p50\":%.2f,"
      "\"pick_us_p99\":%.2f,\"picks_with_a_hit\":%lld,\"exact_indexed_blocks\":%lld,"
      "\"event_apply_per_s\":%.0f,\"steady_event_apply_per_s\":%.0f,"
      "\"exact_pick_us_p50\":%.2f,\"exact_pick_us_p99\":%.2f,\"exact_picks_with_a_hit\":%lld}\n",
      a.replicas, (long long)indexed, sessions.size(), double(updates) / fill_s, a.picks, p50(us),
      p99(us), (long long)hits, (long long)exact_indexed, fill_rate, steady_rate, p50(eus),
      p99(eus), (long long)exact_hits);
  return 0;
}

}  // namespace

void add_router_bench_command(CLI::App* bench, Runner* run) {
  auto a = std::make_shared<BenchRouterArgs>();
  auto* c = bench->add_subcommand("router", "The cache-aware routing decision at scale");
  c->add_option("--replicas", a->replicas, "Replicas (default 64)")->check(CLI::Range(1, 4096));
  c->add_option("--blocks", a->blocks, "Prompt blocks to index (default 1,048,576)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  c->add_option("--prompt-blocks", a->prompt_blocks, "Blocks of a session's first turn")
      ->check(CLI::Range(1, 1 << 16));
  c->add_option("--picks", a->picks, "Routing decisions timed")->check(CLI::Range(1, 1 << 24));
  c->callback([a, run] { *run = [a] { return run_bench_router(*a); }; });
}

}  // namespace fathom::cli
