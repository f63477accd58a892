#include "grammar/compile_queue.h"

#include <algorithm>
#include <string_view>

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
                          std::shared_ptr<CancelToken> cancel, Done done, std::string client) {
  if (!cancel) cancel = std::make_shared<CancelToken>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      ++clients_[client].waiting;
      jobs_.push_back({std::move(spec), std::move(cancel), std::move(done), std::move(client)});
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

CompileQueue::Job CompileQueue::take_next_locked() {
  // Each client's first waiting job, in queue order, is its candidate; the best candidate's
  // client has the fewest running, then the oldest last start. Queues are short (one entry
  // per request waiting for a new grammar), so a scan is cheap beside any compile.
  auto best = jobs_.end();
  const Client* best_client = nullptr;
  std::unordered_map<std::string_view, bool> seen;
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (!seen.emplace(it->client, true).second) continue;
    const Client& c = clients_.at(it->client);
    if (!best_client || c.running < best_client->running ||
        (c.running == best_client->running && c.last_start < best_client->last_start)) {
      best = it;
      best_client = &c;
    }
  }
  Job job = std::move(*best);
  jobs_.erase(best);
  Client& c = clients_.at(job.client);
  --c.waiting;
  ++c.running;
  c.last_start = ++starts_;
  return job;
}

void CompileQueue::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = take_next_locked();
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
      auto c = clients_.find(job.client);
      if (--c->second.running == 0 && c->second.waiting == 0) clients_.erase(c);
    }
    job.done(std::move(r));
  }
}

}  // namespace fathom::grammar
