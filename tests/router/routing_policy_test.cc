// The routing policies against their definitions: round robin cycles, least load takes the
// least loaded, the power of two choices never takes the more loaded of its two, cache-aware
// sends a prompt to the replica that was sent its prefix (and stops at the chain's first
// missing block), and the imbalance override sends work to the least loaded whatever its cache.
#include "router/routing_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace fathom::router {
namespace {

std::vector<int32_t> prompt(int blocks, int32_t seed, int extra = 5) {
  std::vector<int32_t> p;
  for (int i = 0; i < blocks * 128 + extra; ++i) p.push_back((seed * 7919 + i * 31) % 100000);
  return p;
}

std::vector<Candidate> loads(std::vector<int64_t> l) {
  std::vector<Candidate> c;
  for (size_t i = 0; i < l.size(); ++i) c.push_back({i, l[i]});
  return c;
}

TEST(RoutingPolicy, RoundRobinCyclesOverTheCandidates) {
  RoutingPolicy p(3, {Policy::kRoundRobin});
  const auto c = loads({5, 0, 9});
  std::vector<size_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(p.pick(prompt(1, 1), 0, c).replica);
  EXPECT_EQ(got, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
}

TEST(RoutingPolicy, LeastLoadTakesTheLeastLoaded) {
  RoutingPolicy p(4, {Policy::kLeastLoad});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(p.pick(prompt(1, i), 0, loads({3, 7, 1, 4})).replica, 2u);
}

TEST(RoutingPolicy, PowerOfTwoNeverTakesTheMostLoadedOfMany) {
  RoutingPolicy p(4, {Policy::kPowerOfTwo});
  // Of any two distinct replicas, the more loaded is never taken: replica 3 (the most) never is.
  for (int i = 0; i < 200; ++i) EXPECT_NE(p.pick(prompt(0, i), 0, loads({1, 2, 3, 9})).replica, 3u);
}

TEST(RoutingPolicy, CacheAwareFollowsThePrefixAndStopsAtTheFirstMissingBlock) {
  RoutingPolicy p(3, {Policy::kCacheAware});
  const auto c = loads({0, 0, 0});
  const std::vector<int32_t> a = prompt(4, 1), b = prompt(4, 2);
  p.routed(1, a, 0);
  p.routed(2, b, 0);
  Choice x = p.pick(a, 0, c);
  EXPECT_EQ(x.replica, 1u);
  EXPECT_EQ(x.prompt_blocks, 4);
  EXPECT_EQ(x.predicted_hit_blocks, 4);
  EXPECT_EQ(p.pick(b, 0, c).replica, 2u);
  // A longer prompt that extends `a` (a next turn) goes where `a` went; another tenant's salt
  // does not match it.
  std::vector<int32_t> a2 = a;
  a2.insert(a2.end(), 300, 17);
  EXPECT_EQ(p.pick(a2, 0, c).predicted_hit_blocks, 4);
  EXPECT_EQ(p.pick(a2, 0, c).replica, 1u);
  EXPECT_EQ(p.pick(a2, 99, c).predicted_hit_blocks, 0);
  // The chain: with block 0 changed, nothing after it matches either.
  std::vector<int32_t> a3 = a;
  a3[3] ^= 1;
  EXPECT_EQ(p.pick(a3, 0, loads({0, 0, 0})).predicted_hit_blocks, 0);
  // Load against cache: 4 blocks to save is worth less than 5 more requests in flight.
  EXPECT_EQ(p.pick(a, 0, loads({0, 5, 0})).replica == 1u, false);
  EXPECT_EQ(p.pick(a, 0, loads({0, 3, 0})).replica, 1u);
}

TEST(RoutingPolicy, CacheAwareImbalanceOverrideTakesTheLeastLoaded) {
  RoutingOptions o{Policy::kCacheAware};
  o.alpha = 100;  // the cache would win by far
  RoutingPolicy p(2, o);
  const std::vector<int32_t> a = prompt(8, 3);
  p.routed(0, a, 0);
  EXPECT_EQ(p.pick(a, 0, loads({8, 0})).replica, 0u);    // within the threshold (8)
  EXPECT_EQ(p.pick(a, 0, loads({9, 0})).replica, 1u);    // 9 - 0 > 8 and 9 > 1.5 x 0
  EXPECT_EQ(p.pick(a, 0, loads({30, 21})).replica, 0u);  // 30 < 1.5 x 21: no override
}

TEST(RoutingPolicy, TheIndexForgetsTheLeastRecentlyRoutedBlocks) {
  RoutingOptions o{Policy::kCacheAware};
  o.max_blocks_per_replica = 16;
  RoutingPolicy p(1, o);
  for (int i = 0; i < 20; ++i) p.routed(0, prompt(2, 100 + i), 0);
  EXPECT_LE(p.indexed_blocks(0), 16);
  EXPECT_EQ(p.pick(prompt(2, 119), 0, loads({0})).predicted_hit_blocks, 2);  // the newest stays
  EXPECT_EQ(p.pick(prompt(2, 100), 0, loads({0})).predicted_hit_blocks, 0);  // the oldest went
}

TEST(RoutingPolicy, PolicyNamesParseAndBadOnesAreRefused) {
  for (const char* n : {"cache_aware", "round_robin", "least_load", "power_of_two"}) {
    auto p = parse_policy(n);
    ASSERT_TRUE(p.is_ok());
    EXPECT_STREQ(policy_name(*p), n);
  }
  EXPECT_FALSE(parse_policy("random").is_ok());
}

}  // namespace
}  // namespace fathom::router
