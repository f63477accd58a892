// ThreadPool: a fixed set of worker threads for data-parallel work (encoding segments,
// kernels). parallel_for() splits [0, n) over the workers plus the calling thread and
// returns when every index has run. It may be called from several threads at once; calls
// then share the workers. Tasks must not throw. Destroying the pool joins the workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fathom {

class ThreadPool {
 public:
  // threads: total parallelism including the caller (1 = run everything inline).
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Runs fn(i) for every i in [0, n), each exactly once, on any thread. Blocks until done.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

 private:
  struct Job;
  void worker_loop();
  static size_t run_job(Job& job);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;       // new work or stop
  std::condition_variable done_cv_;  // a job finished
  std::vector<Job*> jobs_;           // guarded by mu_
  std::atomic<uint64_t> posted_{0};  // jobs ever posted (lets idle workers spin)
  std::atomic<bool> stopping_{false};
  bool stop_ = false;  // guarded by mu_
};

// Runs fn(i) for every i in [0, n): over `pool` when it is non-null and n > 1, else in order
// on the calling thread. For loops whose iterations are independent (rows of a batch).
template <typename Fn>
void for_each_row(ThreadPool* pool, int64_t n, Fn fn) {
  if (pool != nullptr && n > 1)
    pool->parallel_for(size_t(n), [&](size_t i) { fn(int64_t(i)); });
  else
    for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace fathom
