#include "engine/store_prefetch.h"

#include <algorithm>
#include <span>

namespace fathom::engine {

StorePrefetcher::StorePrefetcher(kv::Store* store, Limits limits)
    : store_(store), limits_(limits), thread_([this] { loop(); }) {}

StorePrefetcher::~StorePrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StorePrefetcher::start(uint64_t id, int64_t first_block, std::vector<kv::StoreKey> keys,
                            std::vector<kv::StoreKey> window_keys, kv::RetentionClass cls) {
  if (keys.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    if (int64_t(jobs_.size()) >= limits_.max_jobs) {
      auto read = std::find_if(jobs_.begin(), jobs_.end(),
                               [](const Job& j) { return j.state == Job::State::kRead; });
      if (read == jobs_.end()) return;  // every slot queued or under way
      held_bytes_ -= read->held;
      jobs_.erase(read);
    }
    Job j;
    j.id = id;
    j.first_block = first_block;
    j.keys = std::move(keys);
    if (window_keys.size() == j.keys.size()) j.window_keys = std::move(window_keys);
    j.cls = cls;
    jobs_.push_back(std::move(j));
  }
  cv_.notify_all();
}

StorePrefetcher::Prefetched StorePrefetcher::take(uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto find = [&] {
    return std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.id == id; });
  };
  auto it = find();
  if (it == jobs_.end()) return {};
  if (it->state == Job::State::kQueued) {
    jobs_.erase(it);
    return {};
  }
  cv_.wait(lock, [&] {
    it = find();
    return it == jobs_.end() || it->state == Job::State::kRead;
  });
  if (it == jobs_.end()) return {};
  Prefetched out{it->first_block,       std::move(it->bytes), it->window_block,
                 std::move(it->window), it->no_window_from,   it->no_window_to};
  held_bytes_ -= it->held;
  jobs_.erase(it);
  return out;
}

void StorePrefetcher::loop() {
  constexpr size_t kBatch = 16;  // as the executor's reads: one get_many a batch
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = jobs_.end();
    cv_.wait(lock, [&] {
      it = std::find_if(jobs_.begin(), jobs_.end(),
                        [](const Job& j) { return j.state == Job::State::kQueued; });
      return stop_ || it != jobs_.end();
    });
    if (stop_) return;
    it->state = Job::State::kReading;
    // Read without the lock, from a copy of the keys: start() and take() never erase a job
    // under way (take() waits for it), so it is found again by its id afterwards.
    const uint64_t id = it->id;
    const int64_t job_first_block = it->first_block;
    const std::vector<kv::StoreKey> keys = it->keys, window_keys = it->window_keys;
    const kv::RetentionClass cls = it->cls;
    const int64_t others = held_bytes_;  // read and not taken
    lock.unlock();
    std::vector<std::string> bytes;
    int64_t held = 0;
    for (size_t first = 0; first < keys.size() && others + held < limits_.max_bytes;) {
      const size_t n = std::min(kBatch, keys.size() - first);
      std::vector<Result<std::string>> got =
          store_->get_many(std::span(keys).subspan(first, n), cls);
      size_t hits = 0;
      while (hits < got.size() && got[hits].is_ok()) {
        held += int64_t(got[hits]->size());
        bytes.push_back(std::move(*got[hits]));
        ++hits;
      }
      if (hits < n) break;
      first += n;
    }
    // The window side object where the request will resume: the deepest block read that has
    // one (as the executor looks for it), within the byte bound.
    const size_t checked = std::min(bytes.size(), window_keys.size());
    std::vector<kv::StoreKey> deepest_first(window_keys.rend() - ptrdiff_t(checked),
                                            window_keys.rend());
    const size_t found = kv::first_held(*store_, deepest_first);
    const int64_t top = job_first_block + int64_t(checked) - 1;  // the deepest block asked about
    int64_t window_block = 0;
    std::string window;
    if (found < checked) {
      Result<std::string> got = store_->get(deepest_first[found], cls);
      if (got.is_ok() && others + held + int64_t(got->size()) <= limits_.max_bytes) {
        held += int64_t(got->size());
        window_block = top - int64_t(found);
        window = std::move(*got);
      }
    }
    lock.lock();
    auto job = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.id == id; });
    if (job == jobs_.end()) continue;  // never: a job under way is not erased
    job->bytes = std::move(bytes);
    job->window_block = window_block;
    job->window = std::move(window);
    job->no_window_from = top - int64_t(found) + 1;  // found == checked: from job_first_block
    job->no_window_to = top;
    job->held = held;
    job->state = Job::State::kRead;
    held_bytes_ += held;
    cv_.notify_all();
  }
}

}  // namespace fathom::engine
