// MemoryStore: a KV store tier in this process's memory — the staging area of the P/D
// hand-off (serve/pd_routes.h). On a prefill replica the engine writes its prompt blocks here
// as into any tier (put) and the push reads them back; on a decode replica verified pushed
// objects are installed here (install) and the engine's admission reads them as from any tier,
// checking each again. Bounded by bytes, least recently used out first. A leased key is never
// evicted while its lease lasts (released, or past its deadline): a lease may be taken before
// the object exists, so blocks a prefill is about to write stay until their push is done.
// Objects die with the process; retention classes are accepted and ignored.
//
// Thread-safe (one mutex); put() and install() copy nothing but the value they are given.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "kv/store.h"

namespace fathom::kv {

struct MemoryStoreOptions {
  int64_t budget_bytes = int64_t(1) << 30;
  // False on a decode replica: only install() adds objects (the engine's own writes of the
  // blocks it computes are refused, so the area holds pushed objects only).
  bool accept_puts = true;
};

class MemoryStore final : public Store {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit MemoryStore(MemoryStoreOptions options);

  bool contains(const StoreKey& key) override;
  Result<std::string> get(const StoreKey& key, RetentionClass cls) override;
  // Stores at once (no queue); false when refused (accept_puts off) or when it does not fit
  // beside the leased objects (counted as a dropped write).
  bool put(const StoreKey& key, std::string value, RetentionClass cls) override;
  void erase(const StoreKey& key) override;
  void flush() override {}
  StoreStats stats() const override;
  const char* tier_name() const override { return "memory"; }

  // Stores `value` leased until `until` (whatever accept_puts says); false when it does not
  // fit beside the other leased objects.
  bool install(const StoreKey& key, std::string value, TimePoint until);
  // Leases each key (held now or not yet) until `until`; each lease() is ended by one
  // release() of the same keys, or by its deadline.
  void lease(std::span<const StoreKey> keys, TimePoint until);
  void release(std::span<const StoreKey> keys);
  // Keys under a live lease now.
  int64_t leased() const;
  int64_t budget_bytes() const { return opt_.budget_bytes; }

 private:
  struct Entry {
    std::string value;
    std::list<StoreKey>::iterator lru;
  };
  struct Lease {
    int count = 0;
    TimePoint until;
  };
  bool leased_locked(const StoreKey& key, TimePoint now) const;
  // Evicts unleased objects, least recent first, until `need` more bytes fit; false if not.
  bool make_room_locked(int64_t need);
  bool store_locked(const StoreKey& key, std::string value);
  // Forgets leases past their deadline (installed objects' leases are never released).
  void sweep_leases_locked();

  const MemoryStoreOptions opt_;
  mutable std::mutex mu_;
  std::unordered_map<StoreKey, Entry, StoreKeyHash> map_;     // guarded by mu_
  std::list<StoreKey> lru_;                                   // guarded by mu_: most recent first
  std::unordered_map<StoreKey, Lease, StoreKeyHash> leases_;  // guarded by mu_
  size_t sweep_at_ = 1024;                                    // guarded by mu_
  int64_t bytes_ = 0;                                         // guarded by mu_
  StoreStats stats_;                                          // guarded by mu_
};

}  // namespace fathom::kv
