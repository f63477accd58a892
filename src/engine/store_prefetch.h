// StorePrefetcher: reads the KV-store objects of a queued request's prompt blocks on a thread of
// its own while the request waits, so that its admission (on the engine's executor) decodes
// bytes already in memory instead of waiting on the disk or the network there: the block
// objects of the chain the store holds, and the window side object of the deepest block of
// that chain that has one (where the request will resume). It only moves bytes: the executor
// checks and decodes what it takes exactly as it does what it reads itself (a damaged object
// is a miss), and reads whatever was not prefetched.
//
// Bounded: at most max_jobs requests' reads are held (queued, under way, or read and not yet
// taken; a new request pushes out the oldest read one, or is not prefetched when none is read)
// and at most max_bytes read and not taken (a request's reads stop at the bound). A request
// that never comes to be admitted (cancelled while queued) is pushed out the same way.
//
// Thread-safe: start() from any thread (the engine's submit), take() from the executor; one
// reader thread, stopped and joined by the destructor (queued reads are dropped).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kv/store.h"

namespace fathom::engine {

class StorePrefetcher {
 public:
  struct Limits {
    int64_t max_jobs = 16;
    int64_t max_bytes = int64_t(256) << 20;
  };
  // Block objects read from the store, consecutive hits from first_block (1-based), and the
  // window side object of block window_block (0: none read), the deepest of those blocks the
  // store held one for when it was read. The store did not say it held a window side object
  // for blocks no_window_from through no_window_to (none when to < from) when it was asked
  // (an unreadable store says no): the executor does not ask again. One written since, or
  // unread then, costs only a shallower resume.
  struct Prefetched {
    int64_t first_block = 0;
    std::vector<std::string> bytes;
    int64_t window_block = 0;
    std::string window;
    int64_t no_window_from = 1, no_window_to = 0;
  };

  // `store` must outlive the prefetcher.
  StorePrefetcher(kv::Store* store, Limits limits);
  ~StorePrefetcher();
  StorePrefetcher(const StorePrefetcher&) = delete;
  StorePrefetcher& operator=(const StorePrefetcher&) = delete;

  // Queues the reads of `keys`, the block objects of blocks first_block, first_block + 1, ...
  // of request `id`, for a request of class `cls`. They stop at the first object the store
  // does not hold. `window_keys` (empty, or one per key) are the same blocks' window side
  // objects: the deepest one the store holds among the blocks read is read too.
  void start(uint64_t id, int64_t first_block, std::vector<kv::StoreKey> keys,
             std::vector<kv::StoreKey> window_keys, kv::RetentionClass cls);
  // What was read for `id`, waiting while its reads are under way; nothing when there were none
  // (or they had not started: they are dropped). The job is forgotten.
  Prefetched take(uint64_t id);

 private:
  struct Job {
    uint64_t id = 0;
    int64_t first_block = 0;
    std::vector<kv::StoreKey> keys, window_keys;
    kv::RetentionClass cls = kv::kDefaultRetention;
    enum class State { kQueued, kReading, kRead } state = State::kQueued;
    std::vector<std::string> bytes;
    int64_t window_block = 0;
    std::string window;
    int64_t no_window_from = 1, no_window_to = 0;
    int64_t held = 0;  // bytes
  };
  void loop();

  kv::Store* const store_;
  const Limits limits_;
  std::mutex mu_;
  std::condition_variable cv_;  // a job queued, a job read, or stop
  std::deque<Job> jobs_;        // guarded by mu_: oldest first
  int64_t held_bytes_ = 0;      // guarded by mu_: of read jobs
  bool stop_ = false;           // guarded by mu_
  std::thread thread_;
};

}  // namespace fathom::engine
