// Which replica serves a request: round robin, least load, the power of two choices, or
// cache-aware (the default): the replica whose cached prefix the prompt extends furthest,
// weighed against its load, as SGLang's router and Dynamo's KV router do.
//
// The cache-aware view of a replica is exact where the replica publishes its prefix cache's
// KV events (`fathom serve`'s /v1/kv_events): a KvIndex (kv_index.h) fed by its snapshot and
// events, so evictions and blocks the router did not send are seen. Where it does not (vLLM,
// SGLang, or a Fathom replica before its first snapshot) the view is the router's prediction:
// the chained hashes of the 128-token prompt blocks it has sent there (a bounded map per
// replica, the least recently routed blocks forgotten first). Both use the replica's own block
// key (kv::prefix_block_hashes with replica_block_salt, upstream.h). An event-fed view also
// counts the prompt blocks of the requests whose prefill runs there (from hold() to
// release()): the replica computes them now, and its events say so only once they are
// cached, so requests
// routed at once with a shared new prefix go where it is being computed (where the engine
// has them wait for it, engine/scheduler.h) instead of spreading to compute it on every
// replica.
// Cost of replica r = alpha * (prompt blocks r lacks) + load_r; when the loads differ by more
// than `imbalance_abs` requests and the most loaded has over `imbalance_rel` times the least,
// the least loaded wins whatever its cache (the imbalance override).
//
// Not thread-safe: the owner serialises every call (one short lock per request or event).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/kv_event_log.h"
#include "router/kv_index.h"

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
  // The request went to `replica`: its prompt blocks are now expected in its cache (recorded
  // only where the view is predicted). The second form takes the hashes pick() returned
  // (Choice::block_hashes) instead of hashing again.
  void routed(size_t replica, std::span<const int32_t> prompt, uint64_t salt);
  void routed(size_t replica, std::span<const uint64_t> hashes);
  // Where the view of `replica` is exact: counts a request's prompt blocks as the replica's
  // while it computes them (call it with pick() under the same lock, so that requests picked
  // at once see each other) and returns true; call release() with the same hashes once its
  // prefill is done or it ended, when the replica's events carry what it cached. False (and
  // nothing counted) where the view is predicted, or past max_blocks_per_replica.
  bool hold(size_t replica, std::span<const uint64_t> hashes);
  void release(size_t replica, std::span<const uint64_t> hashes);
  // Distinct prompt blocks hold() counts on `replica` now.
  int64_t in_flight_blocks(size_t replica) const { return int64_t(in_flight_[replica].size()); }

  // The chained hash of each full 128-token block of `prompt`: the keys a Fathom replica's
  // prefix cache gives them for a request of tenant hash `salt`.
  std::vector<uint64_t> block_hashes(std::span<const int32_t> prompt, uint64_t salt) const;
  // Blocks the view of `replica` holds (exact or predicted).
  int64_t indexed_blocks(size_t replica) const;

  // The exact view (cache_aware only; the other policies ignore these). load_snapshot() makes
  // `replica` event-fed: its view is then exactly the snapshot plus the events applied after
  // it, and its predictions are dropped. drop() empties its view (the replica is down, or
  // will be reloaded); set_predicted() turns it back to prediction (it serves no events).
  void load_snapshot(size_t replica, const kv::KvSnapshot& snapshot);
  void apply_event(size_t replica, const kv::KvEvent& event);
  void drop(size_t replica);
  void set_predicted(size_t replica);
  bool event_fed(size_t replica) const { return fed_[replica] != 0; }
  const KvIndex& exact_index() const { return exact_; }

 private:
  int64_t matched(size_t replica, const std::vector<uint64_t>& hashes) const;
  // The leading blocks of `hashes` that requests in flight on `replica` are computing.
  int64_t in_flight_matched(size_t replica, const std::vector<uint64_t>& hashes) const;
  void forget_oldest(size_t replica);

  RoutingOptions opt_;
  std::vector<std::unordered_map<uint64_t, uint64_t>> index_;  // per replica: hash -> last use
  KvIndex exact_;                                              // event-fed replicas' blocks
  std::vector<char> fed_;  // per replica: its view is exact_ (else index_)
  // Per replica: prompt block hash -> held requests with it (hold(), where the view is exact).
  std::vector<std::unordered_map<uint64_t, int32_t>> in_flight_;
  std::vector<int64_t> matched_scratch_;
  uint64_t tick_ = 0;
  uint64_t rr_ = 0;
  uint64_t rng_ = 0x9E3779B97F4A7C15ull;
};

}  // namespace fathom::router
