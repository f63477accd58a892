// Scheduler: the waiting queue and the plan of each step — one decode token for every
// running sequence, then prefill chunks (cut at prefix-cache block boundaries) and
// admissions under the step's token budget, while the pool looks like it has room. A queued
// request whose next prompt blocks (past what the prefix cache holds) another request is
// computing now, or is admitted in the same step to compute, waits until they are computed
// and resumes from them, keeping its place (its slot and pages are set aside) while the
// queue behind it goes on: a burst of requests sharing a new prefix computes it once, not
// once per request admitted beside the first. It sees
// the running sequences only through the executor's last Outcome and projects the plan still
// in flight (asynchronous scheduling); the executor checks every intent against its own
// bookkeeping and decides admission and preemption for good.
//
// Owned by the Engine; plan(), apply() and the queue methods run on the engine's scheduler
// thread only. chunk_size() reads only immutable options and may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv_reservations.h"
#include "engine/model_runner.h"
#include "engine/sequence.h"
#include "kv/page_pool.h"

namespace fathom::engine {

struct SchedulerOptions {
  int64_t max_step_tokens = 256;  // token budget of one step
  int64_t max_running = 64;       // sequences running at once
  int64_t prefix_block = 128;     // prefill chunks end at these boundaries of the prompt...
  bool chunk_at_blocks = true;    // ...when the prefix cache is on
};

class Scheduler {
 public:
  // The prefix cache as the scheduler sees it (callable from the scheduler thread): the leading
  // blocks of a prompt's chained block hashes it holds now, and the most blocks a sequence
  // may resume from (the engine's hit rule).
  struct PrefixView {
    std::function<int64_t(std::span<const uint64_t>)> cached_chain;
    std::function<int64_t(const Sequence&)> resumable_blocks;
  };

  // `runner` and `pool` must outlive the scheduler; the pool only sizes the page estimates of
  // admissions (the scheduler allocates nothing from it). `holds` (null: none), when given,
  // must outlive it too: an admission looks for room beside the pages held for other P/D
  // hand-offs. `prefix` (empty: no prefix cache) lets a request wait for blocks another is
  // computing.
  Scheduler(const ModelRunner& runner, kv::PagePool* pool, SchedulerOptions options,
            const KvReservations* holds = nullptr, PrefixView prefix = {});

  // Tokens the executor runs for an intent of `want` on a sequence with `left` tokens to go
  // after `prefilled`: prefill chunks end at the next prefix-cache block of the prompt and at
  // the prompt's end, and a sequence recomputing the tokens it had generated (re-admitted
  // after preemption) runs them one per step, as the decode steps that first ran them did
  // (the model computes a row past the prompt's end as a call of that many rows would; see
  // model::set_prompt_end). The scheduler projects the step in flight with the same rule.
  int64_t chunk_size(const Sequence& s, int64_t prefilled, int64_t left, int64_t want) const;

  void enqueue(std::shared_ptr<Sequence> s) { waiting_.push_back(std::move(s)); }
  // Removes and returns the queued requests whose client cancelled.
  std::vector<std::shared_ptr<Sequence>> take_cancelled();
  // The next step's plan, after `in_flight` (the plan the executor runs now) when non-null.
  // Admitted sequences leave the queue.
  Plan plan(const Plan* in_flight);
  // Takes in what a step did: the running sequences, and those handed back (to the queue's
  // front, preempted first).
  void apply(Outcome& out);
  bool has_work() const { return !waiting_.empty() || !view_.empty(); }
  int64_t waiting() const { return int64_t(waiting_.size()); }
  // Empties the queue (shutdown).
  std::deque<std::shared_ptr<Sequence>> take_waiting();

 private:
  // Whether `s` should wait: blocks of its prompt it may resume from, past the cached chain, are
  // being computed by a running sequence of `now` (projected past the step in flight; those in
  // `fresh` were admitted by it) or by one `admitted` to this plan. (plan() never asks for a
  // request with a KV hold: a P/D hand-off brings its blocks.)
  bool wait_for_shared_blocks(const Sequence& s, const std::vector<Report>& now,
                              const std::vector<const Sequence*>& fresh,
                              const std::vector<std::shared_ptr<Sequence>>& admitted) const;

  const ModelRunner& runner_;
  kv::PagePool* const pool_;
  const SchedulerOptions opt_;
  const KvReservations* const holds_;
  const PrefixView prefix_;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::vector<Report> view_;  // the executor's running sequences as last reported
  int64_t free_pages_ = 0;    // as last reported
};

}  // namespace fathom::engine
