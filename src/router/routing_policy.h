// Which replica serves a request: round robin, least load, the power of two choices, or
// cache-aware (the default): the replica whose cached prefix the prompt extends furthest,
// weighed against its load, as SGLang's router and Dynamo's KV router do.
//
// The cache-aware index is the router's own: the chained hashes of the 128-token prompt
// blocks it has sent to each replica (a bounded map per replica, the least recently routed
// blocks forgotten first). It predicts the replica's prefix cache; it does not read it.
// Cost of replica r = alpha * (prompt blocks r lacks) + load_r; when the loads differ by more
// than `imbalance_abs` requests and the most loaded has over `imbalance_rel` times the least,
// the least loaded wins whatever its cache (the imbalance override).
//
// Not thread-safe: the owner serialises pick() and routed() (one short lock per request).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace fathom::router {

enum class Policy { kCacheAware, kRoundRobin, kLeastLoad, kPowerOfTwo };
Result<Policy> parse_policy(std::string_view name);
const char* policy_name(Policy p);

struct RoutingOptions {
  Policy policy = Policy::kCacheAware;
  int64_t block_tokens = 128;
  double alpha = 1.0;  // load units one missing prompt block costs
  int64_t imbalance_abs = 8;
  double imbalance_rel = 1.5;
  int64_t max_blocks_per_replica = int64_t(1) << 20;
};

// A replica the request may go to: its index and its load (requests in flight).
struct Candidate {
  size_t replica = 0;
  int64_t load = 0;
};

struct Choice {
  size_t replica = 0;
  int64_t predicted_hit_blocks = 0;  // blocks of the prompt the index says it holds
  int64_t prompt_blocks = 0;
  std::vector<uint64_t> block_hashes;  // cache_aware: the prompt's, for routed()
};

class RoutingPolicy {
 public:
  RoutingPolicy(size_t replicas, RoutingOptions options);

  // REQUIRES: candidates is not empty. `salt` separates tenants' prefixes (the cache salt).
  Choice pick(std::span<const int32_t> prompt, uint64_t salt,
              std::span<const Candidate> candidates);
  // The request went to `replica`: its prompt blocks are now expected in its cache. The
  // second form takes the hashes pick() returned (Choice::block_hashes) instead of hashing again.
  void routed(size_t replica, std::span<const int32_t> prompt, uint64_t salt);
  void routed(size_t replica, std::span<const uint64_t> hashes);

  // The chained hash of each full 128-token block of `prompt` (for tests and the bench).
  std::vector<uint64_t> block_hashes(std::span<const int32_t> prompt, uint64_t salt) const;
  int64_t indexed_blocks(size_t replica) const { return int64_t(index_[replica].size()); }

 private:
  int64_t matched(size_t replica, const std::vector<uint64_t>& hashes) const;
  void forget_oldest(size_t replica);

  RoutingOptions opt_;
  std::vector<std::unordered_map<uint64_t, uint64_t>> index_;  // per replica: hash -> last use
  uint64_t tick_ = 0;
  uint64_t rr_ = 0;
  uint64_t rng_ = 0x9E3779B97F4A7C15ull;
};

}  // namespace fathom::router
