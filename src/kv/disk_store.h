// DiskStore: the KV store's local-disk tier (L2). One file per object under a directory,
// DIR/<first two hex digits>/<32 hex digits of the key>.fkv, each written to DIR/tmp/ and
// renamed into place, so a crash mid-write leaves no file under an object's name (and a torn
// file, should the file system produce one, fails the reader's checksum: a miss, never a
// wrong block). The index (key -> size, recency) lives in memory and is rebuilt at open()
// from the directory (recency from file modification times, which get() refreshes); leftover
// temporary files are removed. Objects beyond the byte budget are evicted least recently used
// first.
//
// Thread-safe. put() queues the write for the store's writer thread (bounded by queue_bytes;
// a put that does not fit is dropped and counted) and returns at once; get() reads on the
// caller's thread. The destructor finishes the queued writes.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kv/store.h"
#include "kv/write_queue.h"

namespace fathom::kv {

struct DiskStoreOptions {
  std::string dir;                           // created when missing
  int64_t budget_bytes = int64_t(10) << 30;  // objects kept at most
  int64_t queue_bytes = int64_t(256) << 20;  // writes waiting at most
};

class DiskStore final : public Store {
 public:
  // Opens (creating) the directory and rebuilds the index; kIoError when it is not usable.
  static Result<std::unique_ptr<DiskStore>> open(const DiskStoreOptions& options);
  ~DiskStore() override;
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  bool contains(const StoreKey& key) override;
  Result<std::string> get(const StoreKey& key) override;
  bool put(const StoreKey& key, std::string value) override;
  void erase(const StoreKey& key) override;
  void flush() override;
  StoreStats stats() const override;
  const char* tier_name() const override { return "disk"; }

  // The file that holds (or would hold) `key`.
  std::string path_of(const StoreKey& key) const;

 private:
  explicit DiskStore(DiskStoreOptions options);
  Status rebuild_index();
  // The writer thread's write: DIR/tmp/, then renamed into place and indexed.
  Status write_object(const StoreKey& key, const std::string& value);
  // REQUIRES: mu_ held. Adds or replaces an index entry as the most recently used.
  void index_put(const StoreKey& key, int64_t bytes);
  // REQUIRES: mu_ held. Removes the entry and its file. By value: the caller's key may be
  // the LRU list's own element, which this erases.
  void index_remove(StoreKey key);
  void evict_over_budget();  // REQUIRES: mu_ held

  const DiskStoreOptions opt_;
  mutable std::mutex mu_;
  struct Entry {
    int64_t bytes = 0;
    std::list<StoreKey>::iterator lru;  // position in lru_ (front = least recently used)
  };
  std::unordered_map<StoreKey, Entry, StoreKeyHash> index_;  // guarded by mu_
  std::list<StoreKey> lru_;                                  // guarded by mu_
  StoreStats stats_;                    // guarded by mu_: all but the write queue's counters
  uint64_t tmp_counter_ = 0;            // writer thread only
  bool writes_failing_ = false;         // writer thread only
  std::unique_ptr<WriteQueue> writes_;  // last: its thread stops first
};

}  // namespace fathom::kv
