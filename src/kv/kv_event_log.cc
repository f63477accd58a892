#include "kv/kv_event_log.h"

#include <random>

namespace fathom::kv {

namespace {

uint64_t random_instance() {
  std::random_device rd;
  const uint64_t x = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  return x != 0 ? x : 1;
}

}  // namespace

KvEventLog::KvEventLog(size_t capacity_blocks)
    : instance_(random_instance()), ring_(capacity_blocks > 0 ? capacity_blocks : 1) {}

bool KvEventLog::try_publish(std::span<const KvBlockChange> changes) {
  if (changes.empty()) return true;
  {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    append(changes);
  }
  cv_.notify_all();
  return true;
}

void KvEventLog::publish(std::span<const KvBlockChange> changes) {
  if (changes.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    append(changes);
  }
  cv_.notify_all();
}

void KvEventLog::append(std::span<const KvBlockChange> changes) {
  const uint64_t cap = ring_.size();
  for (size_t i = 0; i < changes.size(); ++i) {
    const KvBlockChange& c = changes[i];
    // A new event unless this change continues the previous one: same kind and, for stored
    // blocks, the child of the block before.
    const bool joins = i > 0 && changes[i - 1].kind == c.kind &&
                       (c.kind == KvEventKind::kRemoved || c.parent == changes[i - 1].hash);
    if (!joins) {
      ++last_id_;
      ++stats_.events;
    }
    Record& r = ring_[written_ % cap];
    if (written_ >= cap) dropped_through_ = std::max(dropped_through_, r.event);
    r.event = last_id_;
    r.hash = c.hash;
    r.parent = c.parent;
    r.kind = c.kind;
    ++written_;
    if (c.kind == KvEventKind::kStored) {
      cached_[c.hash] = c.parent;
      ++stats_.stored_blocks;
    } else {
      cached_.erase(c.hash);
      ++stats_.removed_blocks;
    }
  }
}

KvEventRead KvEventLog::read(uint64_t since, uint64_t instance, size_t max_events) const {
  KvEventRead out;
  std::lock_guard<std::mutex> lock(mu_);
  out.last_id = last_id_;
  if ((instance != 0 && instance != instance_) || since > last_id_ || since < dropped_through_) {
    out.resync = true;
    return out;
  }
  const uint64_t cap = ring_.size();
  uint64_t lo = written_ > cap ? written_ - cap : 0, hi = written_;
  // The first record of event since + 1: ids do not decrease along the ring.
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (ring_[mid % cap].event <= since)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (uint64_t n = lo; n < written_; ++n) {
    const Record& r = ring_[n % cap];
    if (out.events.empty() || out.events.back().id != r.event) {
      if (out.events.size() == max_events) break;
      KvEvent e;
      e.id = r.event;
      e.kind = r.kind;
      e.parent = r.kind == KvEventKind::kStored ? r.parent : 0;
      out.events.push_back(std::move(e));
    }
    out.events.back().hashes.push_back(r.hash);
  }
  return out;
}

KvSnapshot KvEventLog::snapshot() const {
  KvSnapshot s;
  s.instance = instance_;
  std::lock_guard<std::mutex> lock(mu_);
  s.last_id = last_id_;
  s.blocks.assign(cached_.begin(), cached_.end());
  return s;
}

uint64_t KvEventLog::last_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_id_;
}

KvEventLogStats KvEventLog::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvEventLogStats s = stats_;
  s.cached_blocks = cached_.size();
  s.ring_dropped_through = dropped_through_;
  return s;
}

uint64_t KvEventLog::wait(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return last_id_ > seen; });
  return last_id_;
}

}  // namespace fathom::kv
