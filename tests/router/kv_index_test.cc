// The router's exact index (router/kv_index.h) against an independent model — a std::set of
// (replica, hash) — over random stores, removals, clears and loads, with hashes that collide in
// the table (small integers, 0, all ones) and with one and three words of replica bits; and the
// cache-aware policy choosing by the exact view once a replica is event-fed.
#include "router/kv_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "kv/prefix_cache.h"
#include "router/routing_policy.h"
#include "router/upstream.h"

namespace fathom::router {
namespace {

void expect_equal(const KvIndex& idx, const std::set<std::pair<size_t, uint64_t>>& model,
                  const std::vector<uint64_t>& universe) {
  for (size_t r = 0; r < idx.replicas(); ++r) {
    std::vector<uint64_t> want;
    for (const auto& [rr, h] : model)
      if (rr == r) want.push_back(h);
    std::vector<uint64_t> got = idx.hashes_of(r);
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, want) << "replica " << r;
    ASSERT_EQ(idx.blocks(r), int64_t(want.size()));
    for (uint64_t h : universe) ASSERT_EQ(idx.contains(r, h), model.count({r, h}) != 0);
  }
  std::vector<int64_t> all;
  std::vector<uint64_t> chain(universe.begin(), universe.begin() + 6);
  idx.matched_all(chain, all);
  for (size_t r = 0; r < idx.replicas(); ++r) {
    int64_t m = 0;
    while (m < int64_t(chain.size()) && model.count({r, chain[size_t(m)]})) ++m;
    ASSERT_EQ(idx.matched(r, chain), m);
    ASSERT_EQ(all[r], m);
  }
}

void random_ops(size_t replicas) {
  KvIndex idx(replicas);
  std::set<std::pair<size_t, uint64_t>> model;
  std::vector<uint64_t> universe = {0, 1, 2, 3, ~uint64_t(0)};
  std::mt19937_64 rng(replicas);
  for (int i = 0; i < 3000; ++i) universe.push_back(i % 2 ? rng() : uint64_t(i) << 20);
  for (int op = 0; op < 60000; ++op) {
    const size_t r = rng() % replicas;
    const uint64_t h = universe[rng() % (op < 30000 ? universe.size() : 64)];
    const int kind = int(rng() % 100);
    if (kind < 60) {
      kv::KvEvent e;
      e.kind = kv::KvEventKind::kStored;
      e.hashes = {h};
      idx.apply(r, e);
      model.insert({r, h});
    } else if (kind < 99) {
      kv::KvEvent e;
      e.kind = kv::KvEventKind::kRemoved;
      e.hashes = {h};
      idx.apply(r, e);
      model.erase({r, h});
    } else if (op % 2) {
      idx.clear(r);
      for (auto it = model.begin(); it != model.end();)
        it = it->first == r ? model.erase(it) : ++it;
    } else {
      std::vector<std::pair<uint64_t, uint64_t>> snap;
      for (size_t k = 0; k < 50; ++k) snap.push_back({universe[rng() % universe.size()], 0});
      idx.load(r, snap);
      for (auto it = model.begin(); it != model.end();)
        it = it->first == r ? model.erase(it) : ++it;
      for (const auto& [x, p] : snap) model.insert({r, x});
    }
    if (op % 5000 == 0) expect_equal(idx, model, universe);
  }
  expect_equal(idx, model, universe);
  // Everything removed: the table is empty again.
  for (size_t r = 0; r < replicas; ++r)
    for (uint64_t h : universe) idx.remove(r, h);
  EXPECT_EQ(idx.distinct_blocks(), 0);
}

TEST(KvIndex, MatchesASetModelOneWord) { random_ops(3); }
TEST(KvIndex, MatchesASetModelThreeWords) { random_ops(130); }

TEST(KvIndex, CacheAwareFollowsTheExactView) {
  RoutingOptions o;
  RoutingPolicy p(2, o);
  std::vector<int32_t> prompt(128 * 4);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i * 7 % 1000);
  const uint64_t salt = 0x1234;
  // The router's keys are the replica's own: kv::prefix_block_hashes under the salt the
  // replica derives from the cache_salt string the router sends.
  const std::vector<uint64_t> h = p.block_hashes(prompt, salt);
  EXPECT_EQ(h, kv::prefix_block_hashes(prompt, 128, kv::tenant_salt(upstream_salt_name(salt))));
  EXPECT_EQ(p.block_hashes(prompt, 0), kv::prefix_block_hashes(prompt, 128, 0));
  const Candidate both[] = {{0, 0}, {1, 0}};
  // Replica 1 is event-fed and holds three of the four blocks; replica 0 predicted, empty.
  kv::KvSnapshot s;
  s.blocks = {{h[0], 0}, {h[1], h[0]}, {h[2], h[1]}};
  p.load_snapshot(1, s);
  Choice c = p.pick(prompt, salt, both);
  EXPECT_EQ(c.replica, 1u);
  EXPECT_EQ(c.predicted_hit_blocks, 3);
  // An event-fed view records no prediction; it holds the request's blocks while it
  // prefills, and forgets them when released.
  p.routed(1, c.block_hashes);
  EXPECT_EQ(p.indexed_blocks(1), 3);
  EXPECT_TRUE(p.hold(1, c.block_hashes));
  EXPECT_EQ(p.in_flight_blocks(1), 4);
  p.release(1, c.block_hashes);
  EXPECT_EQ(p.in_flight_blocks(1), 0);
  // The replica evicted block 2 (and so 3): the view says one block.
  kv::KvEvent ev;
  ev.id = 1;
  ev.kind = kv::KvEventKind::kRemoved;
  ev.hashes = {h[2], h[1]};
  p.apply_event(1, ev);
  EXPECT_EQ(p.pick(prompt, salt, both).predicted_hit_blocks, 1);
  // Replica 0, predicted, is sent the whole prompt: its prediction now beats 1's real block.
  EXPECT_FALSE(p.hold(0, h));  // a predicted view holds nothing: it records what is routed
  p.routed(0, h);
  c = p.pick(prompt, salt, both);
  EXPECT_EQ(c.replica, 0u);
  EXPECT_EQ(c.predicted_hit_blocks, 4);
  // Down: replica 1's view is empty.
  p.drop(1);
  EXPECT_EQ(p.indexed_blocks(1), 0);
  EXPECT_TRUE(p.event_fed(1));
  p.set_predicted(1);
  EXPECT_FALSE(p.event_fed(1));
}

// Requests picked at once with a shared new prefix: while the first prefills on an event-fed
// replica (whose events cannot show the blocks yet), its held prompt blocks count as that
// replica's, so the second goes there too although another replica has less load; two held
// requests keep a shared block counted until both are released; released blocks count no
// more. Prefixes only: a prompt that diverges stops matching at its first block of its own.
TEST(KvIndex, HeldRequestsCountTheirPromptBlocksUntilReleased) {
  RoutingOptions o;
  RoutingPolicy p(2, o);
  for (size_t r = 0; r < 2; ++r) p.load_snapshot(r, kv::KvSnapshot{});
  std::vector<int32_t> a(128 * 6), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = int32_t(i * 13 % 997);
  b = a;
  for (size_t i = 128 * 4; i < b.size(); ++i) b[i] = int32_t(2000 + i % 100);  // 4 shared blocks
  const Choice first = p.pick(a, 0, std::vector<Candidate>{{0, 0}, {1, 0}});
  ASSERT_TRUE(p.hold(first.replica, first.block_hashes));
  const size_t busy = first.replica, idle = 1 - first.replica;
  // The busy replica has one request in flight; the idle one none, and lacks all 6 blocks.
  const std::vector<Candidate> loads = {{busy, 1}, {idle, 0}};
  Choice second = p.pick(b, 0, loads);
  EXPECT_EQ(second.replica, busy);
  EXPECT_EQ(second.predicted_hit_blocks, 4);
  ASSERT_TRUE(p.hold(second.replica, second.block_hashes));
  EXPECT_EQ(p.in_flight_blocks(busy), 8);  // 4 shared, 2 of each
  p.release(busy, first.block_hashes);
  EXPECT_EQ(p.in_flight_blocks(busy), 6);  // the second still holds the shared 4
  EXPECT_EQ(p.pick(a, 0, std::vector<Candidate>{{busy, 1}, {idle, 0}}).predicted_hit_blocks, 4);
  p.release(busy, second.block_hashes);
  EXPECT_EQ(p.in_flight_blocks(busy), 0);
  // Nothing held, nothing cached (no events came): the load decides.
  EXPECT_EQ(p.pick(a, 0, std::vector<Candidate>{{busy, 1}, {idle, 0}}).replica, idle);
  // Bounded as a predicted view is: a request past the bound is not counted.
  o.max_blocks_per_replica = 8;
  RoutingPolicy small(1, o);
  small.load_snapshot(0, kv::KvSnapshot{});
  EXPECT_TRUE(small.hold(0, first.block_hashes));
  EXPECT_FALSE(small.hold(0, second.block_hashes));
  EXPECT_EQ(small.in_flight_blocks(0), 6);
}

}  // namespace
// A replica's event feed is not trusted to be bounded: past max_blocks_per_replica its new
// blocks are dropped (and counted); blocks it holds stay, and room freed by a removal is used.
TEST(KvIndex, AReplicaHoldsAtMostItsBound) {
  KvIndex idx(2, 3);
  for (uint64_t h = 1; h <= 5; ++h) idx.store(0, h);
  EXPECT_EQ(idx.blocks(0), 3);
  EXPECT_EQ(idx.dropped(), 2);
  EXPECT_TRUE(idx.contains(0, 3));
  EXPECT_FALSE(idx.contains(0, 4));
  idx.store(0, 2);  // held already: not a drop
  EXPECT_EQ(idx.dropped(), 2);
  idx.store(1, 4);  // another replica's bound is its own
  EXPECT_TRUE(idx.contains(1, 4));
  idx.remove(0, 1);
  idx.store(0, 5);
  EXPECT_TRUE(idx.contains(0, 5));
  EXPECT_EQ(idx.blocks(0), 3);
}

}  // namespace fathom::router
