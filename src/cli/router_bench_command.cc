// `fathom bench router`: the cache-aware routing policy's cost at scale, one JSON line —
// the index filled with `--blocks` prompt blocks spread over `--replicas` replicas (multi-turn
// sessions: each prompt extends its session's last one), then the routing decision (pick())
// timed for prompts half of which extend an indexed session and half are new, with random
// loads: `pick_us_p50`, `pick_us_p99`; and the index's update rate while filling it
// (`index_block_updates_per_s`: prompt blocks hashed and recorded per second). Single thread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "cli/commands.h"
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
  std::printf(
      "{\"replicas\":%d,\"indexed_blocks\":%lld,\"sessions\":%zu,\"index_block_updates_per_s\":%."
      "0f,"
      "\"picks\":%d,\"pick_us_p50\":%.2f,\"pick_us_p99\":%.2f,\"picks_with_a_hit\":%lld}\n",
      a.replicas, (long long)indexed, sessions.size(), double(updates) / fill_s, a.picks,
      us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)], (long long)hits);
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
