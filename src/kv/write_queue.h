// WriteQueue: a store tier's asynchronous writes. push() queues an object and returns at once;
// one writer thread hands each to the tier's write function in order. The queue is bounded
// by bytes: a push that does not fit is dropped and counted (the engine never waits for a
// store). A key already queued is not queued twice: it is written once, with the longer of
// the retention classes it was pushed with. The destructor writes what is queued,
// then stops the thread.
//
// Thread-safe. The write function runs on the writer thread only, without the queue's lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/latency.h"
#include "kv/store.h"

namespace fathom::kv {

class WriteQueue {
 public:
  using WriteFn =
      std::function<Status(const StoreKey& key, const std::string& value, RetentionClass cls)>;
  WriteQueue(int64_t max_bytes, WriteFn write);
  ~WriteQueue();
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  // Queues the write; false when it was dropped (the queue is full).
  bool push(const StoreKey& key, std::string value, RetentionClass cls);
  // True while `key` waits to be written (or is being written).
  bool pending(const StoreKey& key) const;
  // Waits until every queued write is done.
  void flush();

  struct Stats {
    int64_t queued_bytes = 0, dropped = 0, writes = 0, errors = 0, bytes_written = 0;
    std::vector<LatencyHistogram> write_seconds;  // by class; of the writes that succeeded
    // Puts these into a tier's stats (its write counters, and its classes' write latencies).
    void add_to(StoreStats* s) const;
  };
  Stats stats() const;

 private:
  void loop();

  const int64_t max_bytes_;
  const WriteFn write_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::pair<StoreKey, std::string>> queue_;  // guarded by mu_
  // Keys queued or being written, with their class. Guarded by mu_.
  std::unordered_map<StoreKey, RetentionClass, StoreKeyHash> pending_;
  bool writing_ = false, stop_ = false;  // guarded by mu_
  Stats stats_;                          // guarded by mu_
  std::thread thread_;
};

}  // namespace fathom::kv
