// KvIndex: the router's exact index of which replica caches which prefix block, fed by the
// replicas' KV events (kv/kv_event_log.h) and snapshots. A block's key is its chained hash
// (kv::prefix_block_hashes), which already names its whole prefix, so a flat hash map from the
// 64-bit key to a bitset of replicas is exact: a prompt's hit on a replica is its longest run
// of leading blocks with the replica's bit set. Events' parent hashes are therefore not needed
// here. One map operation per block change; a lookup per prompt block answers every replica.
//
// Open addressing (linear probing, backward-shift deletion) over power-of-two tables, at most
// half full; a slot is its key followed by ceil(replicas / 64) words of bits, so an operation
// touches one cache line. Not thread-safe: the owner
// (RoutingPolicy, under its owner's lock) serialises every call.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kv/kv_event_log.h"

namespace fathom::router {

class KvIndex {
 public:
  // A replica holds at most max_blocks_per_replica blocks here: a store past it is dropped
  // (a replica's event feed is not trusted to be bounded).
  explicit KvIndex(size_t replicas, int64_t max_blocks_per_replica = int64_t(1) << 22);

  size_t replicas() const { return counts_.size(); }
  // Replica r now holds / no longer holds `hash` (idempotent; a new block past the bound is
  // dropped).
  void store(size_t r, uint64_t hash);
  void remove(size_t r, uint64_t hash);
  // A stored or removed event of replica r: every block it names.
  void apply(size_t r, const kv::KvEvent& e);
  // Replica r holds exactly these blocks (hash, parent) from now on.
  void load(size_t r, std::span<const std::pair<uint64_t, uint64_t>> blocks);
  // Replica r holds nothing.
  void clear(size_t r);

  bool contains(size_t r, uint64_t hash) const;
  // The leading blocks of `hashes` replica r holds (the first miss ends the chain).
  int64_t matched(size_t r, std::span<const uint64_t> hashes) const;
  // matched() for every replica at once (out[r]), one lookup per block.
  void matched_all(std::span<const uint64_t> hashes, std::vector<int64_t>& out) const;
  int64_t blocks(size_t r) const { return counts_[r]; }
  // Stores dropped at the bound, all replicas.
  int64_t dropped() const { return dropped_; }
  int64_t distinct_blocks() const { return int64_t(used_) + (zero_used_ ? 1 : 0); }
  // Every block replica r holds (any order).
  std::vector<uint64_t> hashes_of(size_t r) const;

 private:
  size_t home(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  // The slot holding `key`, else the empty slot where it would go. REQUIRES: key != 0.
  size_t probe(uint64_t key) const;
  size_t slots() const { return table_.size() / stride_; }
  uint64_t& key(size_t slot) { return table_[slot * stride_]; }
  uint64_t key(size_t slot) const { return table_[slot * stride_]; }
  uint64_t* bits(size_t slot) { return &table_[slot * stride_ + 1]; }
  const uint64_t* bits(size_t slot) const { return &table_[slot * stride_ + 1]; }
  bool empty_bits(const uint64_t* b) const;
  void erase_slot(size_t slot);
  void grow();
  // The bits of `hash`, or null when no replica holds it.
  const uint64_t* find(uint64_t hash) const;

  size_t words_, stride_;
  int shift_ = 0;
  // Per slot: the key (0 = empty; hash 0 lives in zero_bits_), then words_ words of bits.
  std::vector<uint64_t> table_;
  size_t used_ = 0;
  std::vector<uint64_t> zero_bits_;
  bool zero_used_ = false;
  std::vector<int64_t> counts_;  // blocks per replica
  int64_t max_blocks_;
  int64_t dropped_ = 0;
};

}  // namespace fathom::router
