#include "grammar/compile_queue.h"

#include <algorithm>
#include <chrono>
#include <tuple>

namespace fathom::grammar {
namespace {

Status stopping() { return cancelled("grammar compilation cancelled: the server is stopping"); }

bool raised(const std::shared_ptr<CancelToken>& t) { return t && t->cancelled(); }

}  // namespace

CompileQueue::CompileQueue(GrammarCache& cache, size_t threads) : cache_(cache) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i)
    threads_.emplace_back([this] { run(); });
  watcher_ = std::thread([this] { watch(); });
}

CompileQueue::~CompileQueue() {
  std::vector<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    // The running compiles' jobs are answered by their threads, once the raised tokens stop
    // them.
    for (auto& [key, c] : by_key_)
      if (!c->started)
        for (Job& j : c->jobs) left.push_back(std::move(j));
    by_key_.clear();
    clients_.clear();
    waiting_ = 0;
    for (auto& c : running_) c->stop->cancel();
  }
  cv_.notify_all();
  watch_cv_.notify_all();
  for (Job& j : left) j.done(stopping());
  for (std::thread& t : threads_) t.join();
  watcher_.join();
}

void CompileQueue::submit(std::shared_ptr<const PreparedGrammar> grammar,
                          std::shared_ptr<CancelToken> cancel, Done done, std::string client) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      // The map's key views the compile's own key (grammar->key, kept by c->grammar).
      std::shared_ptr<Compile>& c = by_key_[grammar->key];
      if (c) {
        ++shared_;
        c->jobs.push_back({std::move(cancel), std::move(done)});
        if (c->started) return;
      } else {
        c = std::make_shared<Compile>();
        c->grammar = std::move(grammar);
        c->jobs.push_back({std::move(cancel), std::move(done)});
      }
      // Waiting: in this client's turn too (whichever turn comes first starts it).
      clients_[std::move(client)].compiles.push_back(c);
      ++waiting_;
      cv_.notify_one();
      return;
    }
  }
  done(stopping());
}

size_t CompileQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [key, c] : by_key_) n += !c->started && !abandoned_locked(*c);
  return n;
}

size_t CompileQueue::skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}

size_t CompileQueue::shared() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_;
}

std::pair<std::shared_ptr<CompileQueue::Compile>, std::string> CompileQueue::take_next_locked() {
  while (waiting_ > 0) {
    // One look at each client with an entry waiting (a flood of one client's requests costs
    // nothing here): fewest running, then the oldest last start.
    auto best = clients_.end();
    for (auto it = clients_.begin(); it != clients_.end(); ++it) {
      const Client& c = it->second;
      if (c.compiles.empty()) continue;
      if (best == clients_.end() || c.running < best->second.running ||
          (c.running == best->second.running && c.last_start < best->second.last_start))
        best = it;
    }
    Client& c = best->second;
    std::shared_ptr<Compile> next = std::move(c.compiles.front());
    c.compiles.pop_front();
    --waiting_;
    if (next->started) {  // another client's turn started it
      if (c.compiles.empty() && c.running == 0) clients_.erase(best);
      continue;
    }
    next->started = true;
    ++c.running;
    c.last_start = ++starts_;
    return {std::move(next), best->first};
  }
  return {nullptr, {}};
}

bool CompileQueue::abandoned_locked(const Compile& c) {
  return std::all_of(c.jobs.begin(), c.jobs.end(), [](const Job& j) { return raised(j.cancel); });
}

std::vector<CompileQueue::Job> CompileQueue::detach_locked(const std::shared_ptr<Compile>& c,
                                                           const std::string& client) {
  // Gone at the destructor (nothing is left to share then).
  if (auto it = by_key_.find(c->grammar->key); it != by_key_.end() && it->second == c)
    by_key_.erase(it);
  // An entry of c left in another client's queue (its turn did not start it) holds only the
  // husk until it comes up, not the grammar's spec.
  c->grammar.reset();
  if (auto it = std::find(running_.begin(), running_.end(), c); it != running_.end())
    running_.erase(it);
  if (auto it = clients_.find(client); it != clients_.end())
    if (--it->second.running == 0 && it->second.compiles.empty()) clients_.erase(it);
  return std::move(c->jobs);
}

void CompileQueue::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    watch_cv_.wait(lock, [&] { return stop_ || !running_.empty(); });
    if (stop_ || watch_cv_.wait_for(lock, kWatchPeriod, [&] { return stop_; })) return;
    for (const auto& c : running_)
      if (abandoned_locked(*c)) c->stop->cancel();
  }
}

void CompileQueue::run() {
  for (;;) {
    std::shared_ptr<Compile> c;
    std::string client;
    Result<std::shared_ptr<const CompiledGrammar>> r = cancelled("grammar compilation cancelled");
    std::vector<Job> jobs;
    bool detached = false;  // c is out of the books (and its grammar let go)
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || waiting_ > 0; });
      if (stop_) return;
      std::tie(c, client) = take_next_locked();
      if (!c) continue;
      if (abandoned_locked(*c)) {  // every job's client left before its turn
        skipped_ += c->jobs.size();
        jobs = detach_locked(c, client);
        detached = true;
      } else {
        running_.push_back(c);
        watch_cv_.notify_one();
      }
    }
    while (!detached) {
      std::shared_ptr<CancelToken> token;
      {
        std::lock_guard<std::mutex> lock(mu_);
        token = c->stop;
      }
      r = cache_.get(*c->grammar, token.get());
      std::lock_guard<std::mutex> lock(mu_);
      // Stopped because every job had left, and a job joined since: again, for it.
      if (!r.is_ok() && r.status().code() == StatusCode::kCancelled && !stop_ &&
          !abandoned_locked(*c)) {
        c->stop = std::make_shared<CancelToken>();
        continue;
      }
      if (stop_ && !r.is_ok() && r.status().code() == StatusCode::kCancelled) r = stopping();
      jobs = detach_locked(c, client);
      detached = true;
    }
    for (Job& j : jobs)
      j.done(raised(j.cancel) && r.is_ok() ? Result<std::shared_ptr<const CompiledGrammar>>(
                                                 cancelled("grammar compilation cancelled"))
                                           : r);
  }
}

}  // namespace fathom::grammar
