#include "kv/memory_store.h"

#include <algorithm>
#include <utility>

namespace fathom::kv {

MemoryStore::MemoryStore(MemoryStoreOptions options) : opt_(options) {}

bool MemoryStore::leased_locked(const StoreKey& key, TimePoint now) const {
  auto it = leases_.find(key);
  return it != leases_.end() && it->second.count > 0 && it->second.until > now;
}

bool MemoryStore::make_room_locked(int64_t need) {
  if (need > opt_.budget_bytes) return false;
  const TimePoint now = std::chrono::steady_clock::now();
  auto it = lru_.end();
  while (bytes_ + need > opt_.budget_bytes && it != lru_.begin()) {
    --it;
    if (leased_locked(*it, now)) continue;
    auto e = map_.find(*it);
    bytes_ -= int64_t(e->second.value.size());
    map_.erase(e);
    it = lru_.erase(it);
    ++stats_.evictions;
  }
  return bytes_ + need <= opt_.budget_bytes;
}

bool MemoryStore::store_locked(const StoreKey& key, std::string value) {
  const int64_t need = int64_t(value.size());
  if (auto old = map_.find(key); old != map_.end()) {
    bytes_ -= int64_t(old->second.value.size());
    lru_.erase(old->second.lru);
    map_.erase(old);
  }
  if (!make_room_locked(need)) {
    ++stats_.dropped_writes;
    return false;
  }
  lru_.push_front(key);
  map_.emplace(key, Entry{std::move(value), lru_.begin()});
  bytes_ += need;
  ++stats_.writes;
  stats_.bytes_written += need;
  return true;
}

bool MemoryStore::contains(const StoreKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(key) != 0;
}

Result<std::string> MemoryStore::get(const StoreKey& key, RetentionClass) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++stats_.misses;
    return not_found("not in the memory tier");
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++stats_.hits;
  stats_.bytes_read += int64_t(it->second.value.size());
  return it->second.value;
}

bool MemoryStore::put(const StoreKey& key, std::string value, RetentionClass) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!opt_.accept_puts) return false;
  return store_locked(key, std::move(value));
}

void MemoryStore::sweep_leases_locked() {
  if (leases_.size() < sweep_at_) return;
  const TimePoint now = std::chrono::steady_clock::now();
  std::erase_if(leases_, [now](const auto& kv) { return kv.second.until <= now; });
  sweep_at_ = std::max<size_t>(1024, 2 * leases_.size());
}

bool MemoryStore::install(const StoreKey& key, std::string value, TimePoint until) {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_leases_locked();
  Lease& l = leases_[key];
  ++l.count;
  if (l.until < until) l.until = until;
  if (store_locked(key, std::move(value))) return true;
  if (--l.count == 0) leases_.erase(key);
  return false;
}

void MemoryStore::erase(const StoreKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return;
  bytes_ -= int64_t(it->second.value.size());
  lru_.erase(it->second.lru);
  map_.erase(it);
  ++stats_.erased;
}

void MemoryStore::lease(std::span<const StoreKey> keys, TimePoint until) {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_leases_locked();
  const TimePoint now = std::chrono::steady_clock::now();
  for (const StoreKey& k : keys) {
    Lease& l = leases_[k];
    if (l.count > 0 && l.until <= now) l.count = 0;  // an expired lease is over
    ++l.count;
    if (l.until < until) l.until = until;
  }
}

void MemoryStore::release(std::span<const StoreKey> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const StoreKey& k : keys) {
    auto it = leases_.find(k);
    if (it != leases_.end() && --it->second.count <= 0) leases_.erase(it);
  }
}

int64_t MemoryStore::leased() const {
  std::lock_guard<std::mutex> lock(mu_);
  const TimePoint now = std::chrono::steady_clock::now();
  int64_t n = 0;
  for (const auto& [k, l] : leases_)
    if (l.count > 0 && l.until > now) ++n;
  return n;
}

StoreStats MemoryStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StoreStats s = stats_;
  s.objects = int64_t(map_.size());
  s.bytes = bytes_;
  return s;
}

}  // namespace fathom::kv
