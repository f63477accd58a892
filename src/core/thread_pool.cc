#include "core/thread_pool.h"

#include <atomic>

namespace fathom {

struct ThreadPool::Job {
  size_t n = 0;
  const std::function<void(size_t)>* fn = nullptr;
  std::atomic<size_t> next{0};
  size_t done = 0;    // guarded by the pool's mu_
  size_t active = 0;  // workers inside run_job; guarded by the pool's mu_
};

ThreadPool::ThreadPool(size_t threads) {
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

size_t ThreadPool::run_job(Job& job) {
  size_t finished = 0;
  for (;;) {
    size_t i = job.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job.n) break;
    (*job.fn)(i);
    ++finished;
  }
  return finished;
}

void ThreadPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job* job = jobs_.back();
    if (job->next.load(std::memory_order_relaxed) >= job->n) {
      // Every index is claimed; unlist it so we wait for new work instead of spinning.
      jobs_.pop_back();
      continue;
    }
    ++job->active;
    lock.unlock();
    size_t finished = run_job(*job);
    lock.lock();
    job->done += finished;
    --job->active;
    if (job->done == job->n && job->active == 0) done_cv_.notify_all();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Job job;
  job.n = n;
  job.fn = &fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(&job);
  }
  cv_.notify_all();
  size_t finished = run_job(job);
  std::unique_lock<std::mutex> lock(mu_);
  job.done += finished;
  done_cv_.wait(lock, [&] { return job.done == job.n && job.active == 0; });
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (jobs_[i] == &job) {
      jobs_.erase(jobs_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
}

}  // namespace fathom
