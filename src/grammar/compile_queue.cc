#include "grammar/compile_queue.h"

#include <algorithm>
#include <tuple>

namespace fathom::grammar {

CompileQueue::CompileQueue(GrammarCache& cache, size_t threads) : cache_(cache) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i)
    threads_.emplace_back([this] { run(); });
}

CompileQueue::~CompileQueue() {
  std::vector<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& [name, c] : clients_)
      for (Job& j : c.jobs) left.push_back(std::move(j));
    clients_.clear();
    waiting_ = 0;
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
      clients_[std::move(client)].jobs.push_back(
          {std::move(spec), std::move(cancel), std::move(done)});
      ++waiting_;
      cv_.notify_one();
      return;
    }
  }
  done(cancelled("grammar compilation cancelled: the server is stopping"));
}

size_t CompileQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [name, c] : clients_)
    for (const Job& j : c.jobs) n += !j.cancel->cancelled();
  return n;
}

size_t CompileQueue::skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}

std::pair<CompileQueue::Job, std::string> CompileQueue::take_next_locked() {
  // One look at each client with a job waiting (a flood of one client's requests costs
  // nothing here): fewest running, then the oldest last start.
  auto best = clients_.end();
  for (auto it = clients_.begin(); it != clients_.end(); ++it) {
    const Client& c = it->second;
    if (c.jobs.empty()) continue;
    if (best == clients_.end() || c.running < best->second.running ||
        (c.running == best->second.running && c.last_start < best->second.last_start))
      best = it;
  }
  Client& c = best->second;
  std::pair<Job, std::string> out(std::move(c.jobs.front()), best->first);
  c.jobs.pop_front();
  --waiting_;
  ++c.running;
  c.last_start = ++starts_;
  return out;
}

void CompileQueue::run() {
  for (;;) {
    Job job;
    std::string client;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || waiting_ > 0; });
      if (stop_) return;
      std::tie(job, client) = take_next_locked();
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
      // Gone at the destructor (nothing is left to share then).
      if (auto c = clients_.find(client); c != clients_.end())
        if (--c->second.running == 0 && c->second.jobs.empty()) clients_.erase(c);
    }
    job.done(std::move(r));
  }
}

}  // namespace fathom::grammar
