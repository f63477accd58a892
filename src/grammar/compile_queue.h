// CompileQueue: compiles grammars through a GrammarCache on threads of its own, so that a
// request thread never waits for one (a large schema takes seconds): submit() returns at once
// and `done` later runs, on a compile thread, with the result. A key compiles once at a time:
// a job whose grammar is already waiting or compiling joins that compile and is answered with
// its result (a burst of requests with one new schema costs one compile). Clients share the
// threads fairly: the next compile is that of the waiting client with the fewest compiles
// running, then the one whose last compile started longest ago (a new client first), and each
// client's own jobs start in the order it submitted them — so one client with many slow
// grammars delays another's by at most the compiles already running (a job that joins a
// compile also waits in its own client's turn: whichever turn comes first starts it). A job
// whose CancelToken is raised is answered kCancelled; a compile is skipped when every job's
// token is raised before its turn, and stopped (on a token of its own, raised by a watcher
// thread that looks every kWatchPeriod while compiles run) once every job's token is raised
// while it runs — one client leaving never stops a compile another still waits for.
// Destruction stops the running compiles, answers the waiting jobs kCancelled and joins the
// threads.
// Thread-safe: submit(), waiting(), skipped() and shared() from any thread. `done` must not
// call back into the queue's destructor (it may submit).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
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
  void submit(std::shared_ptr<const PreparedGrammar> grammar, std::shared_ptr<CancelToken> cancel,
              Done done, std::string client = {});
  size_t waiting() const;  // compiles submitted, not yet started, with a job not cancelled
  size_t skipped() const;  // jobs answered kCancelled without compiling (raised before their turn)
  size_t shared() const;   // jobs that joined a compile already waiting or running

 private:
  struct Job {
    std::shared_ptr<CancelToken> cancel;
    Done done;
  };
  // One key's compile and the jobs waiting for it.
  struct Compile {
    std::shared_ptr<const PreparedGrammar> grammar;
    std::vector<Job> jobs;  // guarded by mu_
    bool started = false;   // guarded by mu_
    // What the compile polls: raised when every job's token is, or at destruction (replaced
    // by a fresh one when a job joins a compile that stopped so); guarded by mu_.
    std::shared_ptr<CancelToken> stop = std::make_shared<CancelToken>();
  };
  static constexpr std::chrono::milliseconds kWatchPeriod{100};
  // A client with jobs waiting or compiles running: its own queue, first in first out (an
  // entry whose compile another client's turn started is dropped when it comes up).
  struct Client {
    std::deque<std::shared_ptr<Compile>> compiles;
    size_t running = 0;
    uint64_t last_start = 0;  // starts_ when its last compile started (0: none yet)
  };
  void run();
  // The watcher thread: every kWatchPeriod while compiles run, stops those every job left.
  void watch();
  // Whether every job of c has had its token raised. REQUIRES: mu_ held.
  static bool abandoned_locked(const Compile& c);
  // Takes c (started on `client`'s turn) out of the queue's books; its jobs, to answer.
  // REQUIRES: mu_ held.
  std::vector<Job> detach_locked(const std::shared_ptr<Compile>& c, const std::string& client);
  // The next compile by the fairness rule above, and its client's name; null when only
  // entries of compiles already started were left. REQUIRES: mu_ held, waiting_ > 0.
  std::pair<std::shared_ptr<Compile>, std::string> take_next_locked();

  GrammarCache& cache_;
  mutable std::mutex mu_;
  std::condition_variable cv_;                       // a queue entry or stop
  std::condition_variable watch_cv_;                 // a compile started, or stop
  std::unordered_map<std::string, Client> clients_;  // guarded by mu_
  // Compiles waiting or running, by key (a view of the compile's own key); guarded by mu_.
  std::unordered_map<std::string_view, std::shared_ptr<Compile>> by_key_;
  size_t waiting_ = 0;                             // entries in clients_' queues; guarded by mu_
  std::vector<std::shared_ptr<Compile>> running_;  // guarded by mu_
  uint64_t starts_ = 0;                            // guarded by mu_
  bool stop_ = false;                              // guarded by mu_
  size_t skipped_ = 0, shared_ = 0;                // guarded by mu_
  std::vector<std::thread> threads_;
  std::thread watcher_;
};

}  // namespace fathom::grammar
