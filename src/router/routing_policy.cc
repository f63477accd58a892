#include "router/routing_policy.h"

#include <algorithm>

#include "kv/prefix_cache.h"
#include "router/upstream.h"

namespace fathom::router {

Result<Policy> parse_policy(std::string_view name) {
  if (name == "cache_aware") return Policy::kCacheAware;
  if (name == "round_robin") return Policy::kRoundRobin;
  if (name == "least_load") return Policy::kLeastLoad;
  if (name == "power_of_two") return Policy::kPowerOfTwo;
  return invalid_argument("--policy: '" + std::string(name) +
                          "' is not one of cache_aware, round_robin, least_load, power_of_two");
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kCacheAware:
      return "cache_aware";
    case Policy::kRoundRobin:
      return "round_robin";
    case Policy::kLeastLoad:
      return "least_load";
    case Policy::kPowerOfTwo:
      return "power_of_two";
  }
  return "?";
}

RoutingPolicy::RoutingPolicy(size_t replicas, RoutingOptions options)
    : opt_(options),
      index_(replicas),
      exact_(replicas, options.max_blocks_per_replica),
      fed_(replicas, 0),
      in_flight_(replicas) {}

std::vector<uint64_t> RoutingPolicy::block_hashes(std::span<const int32_t> prompt,
                                                  uint64_t salt) const {
  if (opt_.block_tokens <= 0) return {};
  return kv::prefix_block_hashes(prompt, opt_.block_tokens, replica_block_salt(salt));
}

int64_t RoutingPolicy::indexed_blocks(size_t replica) const {
  return fed_[replica] ? exact_.blocks(replica) : int64_t(index_[replica].size());
}

void RoutingPolicy::load_snapshot(size_t replica, const kv::KvSnapshot& snapshot) {
  fed_[replica] = 1;
  index_[replica].clear();
  exact_.load(replica, snapshot.blocks);
}

void RoutingPolicy::apply_event(size_t replica, const kv::KvEvent& event) {
  if (fed_[replica]) exact_.apply(replica, event);
}

void RoutingPolicy::drop(size_t replica) {
  exact_.clear(replica);
  index_[replica].clear();
}

void RoutingPolicy::set_predicted(size_t replica) {
  if (!fed_[replica]) return;
  fed_[replica] = 0;
  exact_.clear(replica);
}

int64_t RoutingPolicy::in_flight_matched(size_t replica,
                                         const std::vector<uint64_t>& hashes) const {
  // A chained hash names its whole prefix, and a held request counts every block of its
  // prompt: the first block no request has ends the chain.
  const auto& f = in_flight_[replica];
  if (f.empty()) return 0;
  int64_t m = 0;
  while (size_t(m) < hashes.size() && f.count(hashes[size_t(m)])) ++m;
  return m;
}

int64_t RoutingPolicy::matched(size_t replica, const std::vector<uint64_t>& hashes) const {
  if (fed_[replica])
    return std::max(exact_.matched(replica, hashes), in_flight_matched(replica, hashes));
  // The chain: block b can only be cached after blocks 0..b-1, so the first miss ends it.
  const auto& idx = index_[replica];
  int64_t m = 0;
  for (uint64_t h : hashes) {
    if (idx.find(h) == idx.end()) break;
    ++m;
  }
  return m;
}

Choice RoutingPolicy::pick(std::span<const int32_t> prompt, uint64_t salt,
                           std::span<const Candidate> c) {
  Choice out;
  auto least = [&] {
    size_t best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if (c[i].load < c[best].load) best = i;
    return best;
  };
  size_t pick = 0;
  std::vector<uint64_t> hashes;
  if (opt_.policy == Policy::kCacheAware) hashes = block_hashes(prompt, salt);
  switch (opt_.policy) {
    case Policy::kRoundRobin:
      pick = size_t(rr_++ % c.size());
      break;
    case Policy::kLeastLoad: {
      // Ties go round: a fresh router spreads its first requests.
      const size_t start = size_t(rr_++ % c.size());
      pick = start;
      for (size_t k = 1; k < c.size(); ++k) {
        const size_t i = (start + k) % c.size();
        if (c[i].load < c[pick].load) pick = i;
      }
      break;
    }
    case Policy::kPowerOfTwo: {
      rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
      const size_t a = size_t(rng_ % c.size());
      rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
      const size_t b = c.size() > 1 ? (a + 1 + size_t(rng_ % (c.size() - 1))) % c.size() : a;
      pick = c[b].load < c[a].load ? b : a;
      break;
    }
    case Policy::kCacheAware: {
      int64_t lo = c[0].load, hi = c[0].load;
      for (const Candidate& x : c) lo = std::min(lo, x.load), hi = std::max(hi, x.load);
      if (hi - lo > opt_.imbalance_abs && double(hi) > opt_.imbalance_rel * double(lo)) {
        pick = least();
        break;
      }
      // Event-fed replicas: one lookup per prompt block answers them all.
      bool any_fed = false;
      for (const Candidate& x : c) any_fed |= fed_[x.replica] != 0;
      if (any_fed) exact_.matched_all(hashes, matched_scratch_);
      const size_t start = size_t(rr_++ % c.size());
      double best = 0;
      for (size_t k = 0; k < c.size(); ++k) {
        const size_t i = (start + k) % c.size();
        const size_t r = c[i].replica;
        const int64_t m = fed_[r] ? std::max(matched_scratch_[r], in_flight_matched(r, hashes))
                                  : matched(r, hashes);
        const double cost = opt_.alpha * double(int64_t(hashes.size()) - m) + double(c[i].load);
        if (k == 0 || cost < best) best = cost, pick = i, out.predicted_hit_blocks = m;
      }
      break;
    }
  }
  out.replica = c[pick].replica;
  out.prompt_blocks = int64_t(hashes.size());
  // The imbalance override picked without scoring: what the index says the replica holds.
  if (opt_.policy == Policy::kCacheAware && out.predicted_hit_blocks == 0)
    out.predicted_hit_blocks = matched(out.replica, hashes);
  out.block_hashes = std::move(hashes);
  return out;
}

void RoutingPolicy::routed(size_t replica, std::span<const int32_t> prompt, uint64_t salt) {
  if (opt_.policy != Policy::kCacheAware) return;
  routed(replica, block_hashes(prompt, salt));
}

void RoutingPolicy::routed(size_t replica, std::span<const uint64_t> hashes) {
  if (opt_.policy != Policy::kCacheAware || fed_[replica]) return;
  auto& idx = index_[replica];
  for (uint64_t h : hashes) idx[h] = ++tick_;
  if (int64_t(idx.size()) > opt_.max_blocks_per_replica) forget_oldest(replica);
}

bool RoutingPolicy::hold(size_t replica, std::span<const uint64_t> hashes) {
  if (opt_.policy != Policy::kCacheAware || !fed_[replica] || hashes.empty()) return false;
  // Bounded as a predicted view is: past the bound a request's blocks are not counted.
  auto& f = in_flight_[replica];
  if (int64_t(f.size() + hashes.size()) > opt_.max_blocks_per_replica) return false;
  for (uint64_t h : hashes) ++f[h];
  return true;
}

void RoutingPolicy::release(size_t replica, std::span<const uint64_t> hashes) {
  auto& f = in_flight_[replica];
  for (uint64_t h : hashes) {
    auto it = f.find(h);
    if (it != f.end() && --it->second <= 0) f.erase(it);
  }
}

void RoutingPolicy::forget_oldest(size_t replica) {
  // Drops the least recently routed quarter at once (amortised: one sweep per many inserts).
  auto& idx = index_[replica];
  std::vector<uint64_t> ticks;
  ticks.reserve(idx.size());
  for (const auto& [h, t] : idx) ticks.push_back(t);
  const size_t cut = ticks.size() / 4;
  std::nth_element(ticks.begin(), ticks.begin() + long(cut), ticks.end());
  const uint64_t below = ticks[cut];
  for (auto it = idx.begin(); it != idx.end();) it = it->second < below ? idx.erase(it) : ++it;
}

}  // namespace fathom::router
