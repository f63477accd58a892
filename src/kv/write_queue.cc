#include "kv/write_queue.h"

#include <algorithm>
#include <chrono>

namespace fathom::kv {

WriteQueue::WriteQueue(int64_t max_bytes, WriteFn write)
    : max_bytes_(max_bytes), write_(std::move(write)), thread_([this] { loop(); }) {}

WriteQueue::~WriteQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool WriteQueue::push(const StoreKey& key, std::string value, RetentionClass cls) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = pending_.find(key); it != pending_.end()) {
      // Classes are numbered by time to live: the larger keeps the object longer. (An object
      // already being written keeps the class it is written with; the next put upgrades it.)
      it->second = std::max(it->second, cls);
      return true;
    }
    if (stats_.queued_bytes + int64_t(value.size()) > max_bytes_) {
      ++stats_.dropped;
      return false;
    }
    stats_.queued_bytes += int64_t(value.size());
    pending_.emplace(key, cls);
    queue_.emplace_back(key, std::move(value));
  }
  cv_.notify_all();
  return true;
}

bool WriteQueue::pending(const StoreKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.count(key) != 0;
}

void WriteQueue::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

WriteQueue::Stats WriteQueue::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void WriteQueue::Stats::add_to(StoreStats* s) const {
  s->queued_bytes = queued_bytes;
  s->dropped_writes += dropped;
  s->writes = writes;
  s->write_errors = errors;
  s->bytes_written = bytes_written;
  for (size_t c = 0; c < write_seconds.size() && c < s->classes.size(); ++c)
    s->classes[c].write_seconds = write_seconds[c];
}

void WriteQueue::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, and everything is written
    auto [key, value] = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    const RetentionClass cls = pending_[key];
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    const Status st = write_(key, value, cls);
    const double took = seconds_since(start);
    lock.lock();
    stats_.queued_bytes -= int64_t(value.size());
    pending_.erase(key);
    if (st.is_ok()) {
      ++stats_.writes;
      stats_.bytes_written += int64_t(value.size());
      if (stats_.write_seconds.size() <= cls) stats_.write_seconds.resize(size_t(cls) + 1);
      stats_.write_seconds[cls].observe(took);
    } else {
      ++stats_.errors;
    }
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

}  // namespace fathom::kv
