// A tier of the KV-cache store below the in-process prefix cache (L1): encoded objects
// (kv/block_format.h) by key. L2 is the local disk (kv/disk_store.h); a distributed tier
// plugs in behind the same interface. A store never interprets what it holds: the reader
// validates every object, and a store only keeps, returns and forgets bytes.
//
// Implementations are thread-safe: the engine's executor reads and queues writes while a
// tier's own threads write. put() never blocks on I/O: a write is queued and, when the queue
// is full, dropped (counted) — a store never slows a decoding step.
//
// Retention (kv/retention.h): put() and get() carry the retention class of the request that
// writes or reads; an object expires at its last use plus its class's time to live (a hit
// refreshes it), and an expired object is a miss.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/block_format.h"
#include "kv/latency.h"
#include "kv/retention.h"

namespace fathom::kv {

// 128 bits naming one object: XXH3-128 of (model fingerprint, chained block hash, kind).
struct StoreKey {
  uint64_t lo = 0, hi = 0;
  bool operator==(const StoreKey&) const = default;
  std::string hex() const;  // 32 hex digits, high first
  // Parses hex(); false for anything else.
  static bool from_hex(std::string_view s, StoreKey* out);
};

struct StoreKeyHash {
  size_t operator()(const StoreKey& k) const {
    return size_t(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull));
  }
};

// The key of the object of `kind` at the block whose chained hash is `chain_hash`.
StoreKey store_key(const Fingerprint& model, uint64_t chain_hash, ObjectKind kind);

// One retention class's counters in one tier. Hits and misses count by the class of the
// request that asked; expirations and evictions by the object's class; bytes written by the
// class the object was written with. Latencies: one read per get() and per get_many() call
// (by the asking request's class), one write per object written (by its class).
struct RetentionStats {
  std::string name;  // the class
  int64_t hits = 0, misses = 0, expirations = 0, evictions = 0, bytes_written = 0;
  LatencyHistogram read_seconds, write_seconds;
};

struct StoreStats {
  int64_t hits = 0, misses = 0;  // get() found / did not find the object
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t writes = 0;                   // objects written
  int64_t dropped_writes = 0;           // puts dropped: the write queue was full
  int64_t write_errors = 0;             // writes that failed (full disk, permissions): dropped too
  int64_t evictions = 0;                // objects removed for the byte budget
  int64_t expirations = 0;              // objects removed because their retention ran out
  int64_t erased = 0;                   // objects removed by erase() (corrupt ones)
  int64_t objects = 0, bytes = 0;       // held now
  int64_t queued_bytes = 0;             // waiting to be written
  int64_t redirects = 0;                // commands sent again elsewhere (Redis MOVED/ASK)
  int64_t round_trips = 0;              // requests reads sent and waited for (Redis; 0 for disk)
  std::vector<RetentionStats> classes;  // by retention class
};

class Store {
 public:
  virtual ~Store() = default;
  // True when the object is held or queued to be written.
  virtual bool contains(const StoreKey& key) = 0;
  // contains() of each key, in order: a tier that can batch questions overrides it (Redis: one
  // pipelined round trip per node); this default asks contains() for each.
  virtual std::vector<bool> contains_many(std::span<const StoreKey> keys);
  // The object's bytes; kNotFound when the store does not hold it (or it expired), kIoError
  // when it can not be read. A hit refreshes the object's expiry for a request of class
  // `cls` (kDefaultRetention: the policy's default).
  virtual Result<std::string> get(const StoreKey& key, RetentionClass cls) = 0;
  // get() of each key, in order: a tier that can batch reads overrides it (Redis: one
  // pipelined round trip per node); this default asks get() for each.
  virtual std::vector<Result<std::string>> get_many(std::span<const StoreKey> keys,
                                                    RetentionClass cls);
  // Queues the object to be written for a request of class `cls`; false when the write was
  // dropped (queue full). An object already held keeps the longer of its class and `cls`.
  virtual bool put(const StoreKey& key, std::string value, RetentionClass cls) = 0;
  // Forgets the object (e.g. it failed validation).
  virtual void erase(const StoreKey& key) = 0;
  // Waits until every queued write is done (tests; shutdown).
  virtual void flush() = 0;
  virtual StoreStats stats() const = 0;
  // Each tier's name and counters (one entry for a single tier).
  virtual std::vector<std::pair<std::string, StoreStats>> tier_stats() const {
    return {{tier_name(), stats()}};
  }
  // "disk", "redis", ...
  virtual const char* tier_name() const = 0;
};

// The index of the first of `keys` that `store` holds (keys.size(): none), asking the first
// alone (where a caller that puts the likeliest first finds it: one round trip), then the rest
// in one contains_many().
size_t first_held(Store& store, std::span<const StoreKey> keys);

}  // namespace fathom::kv
