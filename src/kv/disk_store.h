// DiskStore: the KV store's local-disk tier (L2). One file per object, under the directory
// of the retention class it was last written or used with:
// DIR/class-<class>/<first two hex digits>/<32 hex digits of the key>.fkv, each written to
// DIR/tmp/ and renamed into place, so a crash mid-write leaves no file under an object's name
// (and a torn file, should the file system produce one, fails the reader's checksum: a miss,
// never a wrong block).
//
// Retention: an object expires at its last use plus its class's time to live. The file's
// modification time is set to the clock's now on every write and hit (utimensat), so the
// index (key -> size, class, expiry) that open() rebuilds from the directory recovers every
// expiry after a restart. An expired object is a miss and is removed (an expiration); a use
// by a request of a longer class moves the object into that class. Over the byte budget the
// object that expires soonest goes first (within one class: the least recently used; across
// classes, longer retention is kept). Leftover temporary files are removed at open(); class
// directories that name no configured class are left alone and not indexed; objects of the
// layout before retention classes (DIR/<2 hex>/) are moved into the default class.
//
// Thread-safe. put() queues the write for the store's writer thread (bounded by queue_bytes;
// a put that does not fit is dropped and counted) and returns at once; get() reads on the
// caller's thread. The destructor finishes the queued writes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "kv/clock.h"
#include "kv/retention.h"
#include "kv/store.h"
#include "kv/write_queue.h"

namespace fathom::kv {

struct DiskStoreOptions {
  std::string dir;                           // created when missing
  int64_t budget_bytes = int64_t(10) << 30;  // objects kept at most
  int64_t queue_bytes = int64_t(256) << 20;  // writes waiting at most
  RetentionPolicy retention;                 // the classes and their times to live
  // A file longer than this is not an object (0: no bound): not indexed at open(), and a
  // read of one is a miss (kCorrupt) that removes it, without reading it.
  int64_t max_object_bytes = 0;
  const Clock* clock = nullptr;  // null: the system clock. Not owned; outlives us
};

class DiskStore final : public Store {
 public:
  // Opens (creating) the directory and rebuilds the index; kIoError when it is not usable.
  static Result<std::unique_ptr<DiskStore>> open(const DiskStoreOptions& options);
  ~DiskStore() override;
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  bool contains(const StoreKey& key) override;
  Result<std::string> get(const StoreKey& key, RetentionClass cls) override;
  bool put(const StoreKey& key, std::string value, RetentionClass cls) override;
  void erase(const StoreKey& key) override;
  void flush() override;
  StoreStats stats() const override;
  const char* tier_name() const override { return "disk"; }

  // The file that holds (or would hold) `key` in class `cls`.
  std::string path_of(const StoreKey& key, RetentionClass cls) const;
  // The file that holds `key` now; empty when the store does not hold it.
  std::string path_of(const StoreKey& key) const;
  // The class that holds `key` now (nullopt: not held).
  std::optional<RetentionClass> class_of(const StoreKey& key) const;

 private:
  explicit DiskStore(DiskStoreOptions options);
  Status rebuild_index();
  // The writer thread's write: DIR/tmp/, then renamed into place and indexed.
  Status write_object(const StoreKey& key, const std::string& value, RetentionClass cls);
  int64_t now_ms() const { return clock_->now_ms(); }
  // REQUIRES: mu_ held. Adds or replaces an index entry.
  void index_put(const StoreKey& key, int64_t bytes, RetentionClass cls, int64_t last_use_ms);
  // REQUIRES: mu_ held. Removes the entry and its file. By value: the caller's key may be
  // the expiry order's own element, which this erases.
  void index_remove(StoreKey key);
  // REQUIRES: mu_ held. Removes every object expired at `now`, counting expirations.
  void remove_expired(int64_t now);
  // REQUIRES: mu_ held. Removes expired objects, then the soonest to expire while over budget.
  void evict_over_budget(int64_t now);

  const DiskStoreOptions opt_;
  const Clock* const clock_;
  mutable std::mutex mu_;
  struct Entry {
    int64_t bytes = 0;
    int64_t expiry_ms = 0;  // last use + the class's time to live
    uint64_t seq = 0;       // order of last use among equal expiries
    RetentionClass cls = 0;
  };
  // An entry's place in the expiry order: soonest first, then least recently used.
  struct ExpiryPos {
    int64_t expiry_ms;
    uint64_t seq;
    StoreKey key;
    bool operator<(const ExpiryPos& o) const {
      return expiry_ms != o.expiry_ms ? expiry_ms < o.expiry_ms : seq < o.seq;
    }
  };
  std::unordered_map<StoreKey, Entry, StoreKeyHash> index_;  // guarded by mu_
  std::set<ExpiryPos> expiry_;                               // guarded by mu_
  uint64_t seq_ = 0;                                         // guarded by mu_
  StoreStats stats_;                    // guarded by mu_: all but the write queue's counters
  uint64_t tmp_counter_ = 0;            // writer thread only
  bool writes_failing_ = false;         // writer thread only
  std::unique_ptr<WriteQueue> writes_;  // last: its thread stops first
};

}  // namespace fathom::kv
