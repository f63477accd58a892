#include "grammar/compile_queue.h"

#include <algorithm>

namespace fathom::grammar {

CompileQueue::CompileQueue(GrammarCache& cache, size_t threads) : cache_(cache) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i)
    threads_.emplace_back([this] { run(); });
}

CompileQueue::~CompileQueue() {
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    left.swap(jobs_);
    for (auto& token : running_) token->cancel();
  }
  cv_.notify_all();
  for (Job& j : left) j.done(cancelled("grammar compilation cancelled: the server is stopping"));
  for (std::thread& t : threads_) t.join();
}

void CompileQueue::submit(std::shared_ptr<const GrammarSpec> spec,
                          std::shared_ptr<CancelToken> cancel, Done done) {
  if (!cancel) cancel = std::make_shared<CancelToken>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      jobs_.push_back({std::move(spec), std::move(cancel), std::move(done)});
      cv_.notify_one();
      return;
    }
  }
  done(cancelled("grammar compilation cancelled: the server is stopping"));
}

size_t CompileQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Job& j : jobs_) n += !j.cancel->cancelled();
  return n;
}

size_t CompileQueue::skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}

void CompileQueue::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      running_.push_back(job.cancel);
      skipped_ += job.cancel->cancelled();
    }
    Result<std::shared_ptr<const CompiledGrammar>> r =
        job.cancel->cancelled() ? Result<std::shared_ptr<const CompiledGrammar>>(
                                      cancelled("grammar compilation cancelled"))
                                : cache_.get(*job.spec, job.cancel.get());
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_.erase(std::find(running_.begin(), running_.end(), job.cancel));
    }
    job.done(std::move(r));
  }
}

}  // namespace fathom::grammar
