// CompileQueue: compiles grammars through a GrammarCache on threads of its own, so that a
// request thread never waits for one (a large schema takes seconds): submit() returns at once
// and `done` later runs, on a compile thread, with the result. Clients share the threads
// fairly: the next job is that of the waiting client with the fewest compiles running, then
// the one whose last compile started longest ago (a new client first), and each client's own
// jobs start in the order it submitted them — so one client with many slow grammars delays
// another's by at most the compiles already running. A job whose CancelToken is raised
// before its turn is answered kCancelled without compiling; one raised during its compile
// stops it. Destruction raises the tokens of
// the running jobs, answers the waiting ones kCancelled and joins the threads.
// Thread-safe: submit() and waiting() from any thread. `done` must not call back into the
// queue's destructor (it may submit).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cancel.h"
#include "core/status.h"
#include "grammar/grammar_cache.h"

namespace fathom::grammar {

class CompileQueue {
 public:
  using Done = std::function<void(Result<std::shared_ptr<const CompiledGrammar>>)>;

  // REQUIRES: cache outlives the queue; threads >= 1.
  CompileQueue(GrammarCache& cache, size_t threads);
  ~CompileQueue();
  CompileQueue(const CompileQueue&) = delete;
  CompileQueue& operator=(const CompileQueue&) = delete;

  // `client` names who asked (an address, an API key); jobs of one client start in order.
  void submit(std::shared_ptr<const GrammarSpec> spec, std::shared_ptr<CancelToken> cancel,
              Done done, std::string client = {});
  size_t waiting() const;  // jobs submitted, not yet started, and not cancelled
  size_t skipped() const;  // jobs answered kCancelled without compiling (raised before their turn)

 private:
  struct Job {
    std::shared_ptr<const GrammarSpec> spec;
    std::shared_ptr<CancelToken> cancel;
    Done done;
  };
  // A client with jobs waiting or running: its own queue, first in first out.
  struct Client {
    std::deque<Job> jobs;
    size_t running = 0;
    uint64_t last_start = 0;  // starts_ when its last job started (0: none yet)
  };
  void run();
  // The next job by the fairness rule above, and its client's name. REQUIRES: mu_ held,
  // waiting_ > 0.
  std::pair<Job, std::string> take_next_locked();

  GrammarCache& cache_;
  mutable std::mutex mu_;
  std::condition_variable cv_;                         // a job or stop
  std::unordered_map<std::string, Client> clients_;    // guarded by mu_
  size_t waiting_ = 0;                                 // jobs in clients_' queues; guarded by mu_
  std::vector<std::shared_ptr<CancelToken>> running_;  // guarded by mu_
  uint64_t starts_ = 0;                                // guarded by mu_
  bool stop_ = false;                                  // guarded by mu_
  size_t skipped_ = 0;                                 // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace fathom::grammar
