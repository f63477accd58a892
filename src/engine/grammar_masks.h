// GrammarMaskWorker: computes a step's structured-output token masks on a thread of its own
// while the executor runs the model forward, so that sampling finds them ready instead of
// computing them after the head. A job is one sequence's matcher and the rows it will sample
// this step: the matcher's state now, then (a speculative step's verify rows) the state after
// each draft in turn, up to the first draft the grammar rejects — no row past it can be
// sampled, since that row's mask excludes the draft. The matcher is rolled back to where it
// was, so the worker leaves no trace but the masks. The drafts a job's span points at must stay
// where they are until wait() returns.
//
// Owned by the engine. start() and wait() are called by the executor thread only, in pairs;
// between them the worker owns the jobs' matchers and mask buffers and the executor must not
// touch them. One worker thread, joined by the destructor.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "grammar/matcher.h"

namespace fathom::engine {

class GrammarMaskWorker {
 public:
  struct Job {
    grammar::GrammarMatcher* matcher = nullptr;
    std::span<const int32_t> drafts;  // the verify rows after the first (empty: one row)
    // The first `forced` drafts are emitted as they are (grammar jump-forward): they are
    // accepted without a mask, so row 0 is the state after them.
    size_t forced = 0;
    std::vector<uint32_t>* masks = nullptr;  // out: rows × matcher->mask_words() words
    int64_t* rows = nullptr;  // out: rows written (0 once the matcher has terminated)
  };

  GrammarMaskWorker();
  ~GrammarMaskWorker();
  GrammarMaskWorker(const GrammarMaskWorker&) = delete;
  GrammarMaskWorker& operator=(const GrammarMaskWorker&) = delete;

  // The step's jobs, filled by the executor before start() (the vector is reused).
  std::vector<Job>& jobs() { return jobs_; }
  // Starts the jobs (none: nothing happens, wait() returns at once).
  void start();
  // Blocks until the started jobs are done; returns the seconds it waited.
  double wait();

 private:
  void loop();
  static void run(const Job& job);

  std::vector<Job> jobs_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false;  // guarded by mu_: jobs started and not yet done
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace fathom::engine
