// KvEventLog: the prefix cache's change feed, for a router that keeps an exact index of what
// each replica caches (Dynamo's KV events). The engine publishes "block stored" and "block
// removed" changes, keyed by the prefix cache's chained block hash (kv::prefix_block_hashes,
// the key a router computes from the token ids it sends); readers follow them by event id or
// take a snapshot of every block cached now together with the last event id it reflects.
//
// Events: each has an id (1, 2, ... in this log's lifetime, no gaps), a kind and one or more
// block hashes; a stored event is a chain segment (each block the child of the one before)
// whose first block's parent is `parent` (0 for a chain's first block). Memory is bounded: a
// ring of the most recent `capacity_blocks` block changes. A reader whose next event has left
// the ring, or who names another instance (the replica restarted) or an id from the future,
// is told to resync: read the snapshot, then follow from its last id.
//
// Thread-safety: one publisher (the engine's executor thread) calls try_publish()/publish();
// readers call the const methods from any thread. One mutex guards the ring and the snapshot;
// readers hold it only while they copy (never while they write to a socket), and the
// publisher's try_publish() never waits for it: a busy log keeps the batch for the next step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fathom::kv {

enum class KvEventKind : uint8_t { kStored = 1, kRemoved = 2 };

// One block's change as the prefix cache reports it. parent: the previous block of its chain
// (0 for a chain's first block, and for removals).
struct KvBlockChange {
  uint64_t hash = 0, parent = 0;
  KvEventKind kind = KvEventKind::kStored;
};

struct KvEvent {
  uint64_t id = 0;
  KvEventKind kind = KvEventKind::kStored;
  uint64_t parent = 0;  // stored: the first block's parent (0: a chain's first block)
  std::vector<uint64_t> hashes;
};

struct KvEventRead {
  bool resync = false;  // the events after `since` can not be given: read the snapshot
  uint64_t last_id = 0;
  std::vector<KvEvent> events;  // ids since+1, since+2, ... (at most max_events)
};

struct KvSnapshot {
  uint64_t instance = 0, last_id = 0;
  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // (hash, parent) of every block cached
};

struct KvEventLogStats {
  uint64_t events = 0, stored_blocks = 0, removed_blocks = 0, cached_blocks = 0;
  uint64_t ring_dropped_through = 0;  // the newest event no longer (wholly) in the ring
};

class KvEventLog {
 public:
  // REQUIRES: capacity_blocks > 0. The instance id is random: a restarted replica has another.
  explicit KvEventLog(size_t capacity_blocks);
  KvEventLog(const KvEventLog&) = delete;
  KvEventLog& operator=(const KvEventLog&) = delete;

  uint64_t instance() const { return instance_; }
  size_t capacity_blocks() const { return ring_.size(); }

  // Appends `changes` (in the order the cache made them) as events: consecutive changes of one
  // kind form one event, a stored one only while each block is the child of the one before.
  // try_publish() returns false, taking nothing, when a reader holds the lock.
  bool try_publish(std::span<const KvBlockChange> changes);
  void publish(std::span<const KvBlockChange> changes);

  // The events after `since` (at most max_events), or resync when they can not all be given
  // (`instance` nonzero and not this log's, since past the last id, or gone from the ring).
  KvEventRead read(uint64_t since, uint64_t instance, size_t max_events) const;
  KvSnapshot snapshot() const;
  uint64_t last_id() const;
  KvEventLogStats stats() const;
  // Waits until the last id passes `seen` or `timeout` passes; returns the last id.
  uint64_t wait(uint64_t seen, std::chrono::milliseconds timeout) const;

 private:
  struct Record {
    uint64_t event = 0, hash = 0, parent = 0;
    KvEventKind kind = KvEventKind::kStored;
  };
  void append(std::span<const KvBlockChange> changes);  // REQUIRES: mu_ held

  const uint64_t instance_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<Record> ring_;      // guarded by mu_; record n at ring_[n % size]
  uint64_t written_ = 0;          // guarded by mu_: records ever written
  uint64_t last_id_ = 0;          // guarded by mu_
  uint64_t dropped_through_ = 0;  // guarded by mu_: events with a record overwritten
  std::unordered_map<uint64_t, uint64_t> cached_;  // guarded by mu_: hash -> parent
  KvEventLogStats stats_;                          // guarded by mu_
};

}  // namespace fathom::kv
