#include "engine/kv_reservations.h"

#include <xxhash.h>

#include <algorithm>
#include <string>

namespace fathom::engine {

uint64_t KvReservations::key_of(std::span<const int32_t> prompt, uint64_t salt) {
  return XXH3_64bits_withSeed(prompt.data(), prompt.size_bytes(), salt);
}

void KvReservations::sweep_locked() const {
  if (holds_.empty()) return;
  const auto now = Clock::now();
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (it->second.until <= now) {
      held_ -= it->second.pages;
      it = holds_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<uint64_t> KvReservations::hold(uint64_t key, int64_t pages, int64_t free_pages,
                                      Clock::time_point until) {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked();
  if (pages + held_ > free_pages)
    return Status(StatusCode::kResourceExhausted,
                  "no KV room for the hand-off: it needs " + std::to_string(pages) + " pages, " +
                      std::to_string(std::max<int64_t>(0, free_pages - held_)) + " are free (" +
                      std::to_string(held_) + " held for other hand-offs)");
  const uint64_t id = next_id_++;
  holds_.emplace(id, Hold{key, pages, until});
  held_ += pages;
  return id;
}

void KvReservations::release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = holds_.find(id);
  if (it == holds_.end()) return;
  held_ -= it->second.pages;
  holds_.erase(it);
}

int64_t KvReservations::claim(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked();
  for (auto it = holds_.begin(); it != holds_.end(); ++it)
    if (it->second.key == key) {
      const int64_t pages = it->second.pages;
      held_ -= pages;
      holds_.erase(it);
      return pages;
    }
  return 0;
}

int64_t KvReservations::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked();
  return held_;
}

int64_t KvReservations::held_except(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked();
  for (const auto& [id, h] : holds_)
    if (h.key == key) return held_ - h.pages;  // the hold claim() would take
  return held_;
}

bool KvReservations::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked();
  return holds_.empty();
}

}  // namespace fathom::engine
