// The engine's plain data: one request's sequence (Sequence) and what passes between the
// scheduler and the executor every step (Plan, Report, Outcome). Engine-internal; which
// thread may touch which field is said on each.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "engine/model_runner.h"
#include "engine/request.h"
#include "grammar/matcher.h"

namespace fathom::engine {

// One request. `id`, `req`, `stream`, `submitted` and `block_hashes` are set at submit() and
// then only read; every other field belongs to the executor thread (the scheduler reads
// `resume_hint` only for a sequence the executor has handed back).
struct Sequence {
  uint64_t id = 0;
  GenerationRequest req;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<RunnerSequence> state;
  std::vector<int32_t> all;  // prompt + generated
  std::vector<int32_t> generated;
  std::vector<uint64_t> block_hashes;  // chained hash after each full prompt block (cache on)
  int64_t prefilled = 0;               // tokens of `all` in the state
  int64_t cached = 0;                  // prompt tokens served by the prefix cache
  int64_t cache_blocks = 0;            // of them, blocks already cached (no re-insert)
  // The first prompt block whose store read failed at the last admission (missing,
  // unreadable or damaged; max: none): computed blocks from there on are written to the
  // store without asking whether it holds them.
  int64_t store_unread_from = std::numeric_limits<int64_t>::max();
  // The prompt blocks read from the store at the last admission, store_read_first through
  // store_read_last (none when last < first): the store holds them, so a recompute of them
  // (past the deepest window side object) does not ask again.
  int64_t store_read_first = 1, store_read_last = 0;
  bool first_sent = false;
  bool think_ended = false;  // think_end_id was generated
  // The structured-output constraint's state over `generated` (the output processor creates
  // it when the constraint first applies, replaying `generated`; admit() drops it, so a
  // re-admitted sequence rebuilds it).
  std::unique_ptr<grammar::GrammarMatcher> matcher;
  // This step's masks from the GrammarMaskWorker (written by its thread between start() and
  // wait()): `mask_rows` rows of matcher->mask_words() words, row k the mask for the token
  // after generated[0, mask_base + k); cleared when the step's sampling is done.
  std::vector<uint32_t> masks;
  int64_t mask_base = 0, mask_rows = 0;
  // This step's jump-forward tokens (EngineOptions::grammar_jump_forward): jump[k] is the token
  // after generated[0, jump_base + k), emitted without sampling; cleared after the step.
  std::vector<int32_t> jump;
  int64_t jump_base = 0;
  StreamEvent pending;  // the step's tokens not yet sent (buffers reused)
  // submit_n: the other samples, forked from this one when its prefill completes.
  std::vector<std::shared_ptr<Sequence>> siblings;
  bool done = false;                // finished; the executor forgets it
  int64_t resume_hint = 0;          // tokens it has to run when (re)admitted
  int64_t resume_hint_at_plan = 0;  // scheduler only: resume_hint when its admission was planned
  std::chrono::steady_clock::time_point submitted;
};

// A step's plan: queued requests to admit, and for each sequence the most tokens to run
// (the executor clamps each intent to what the sequence has left).
struct Plan {
  std::vector<std::shared_ptr<Sequence>> admit, cancelled;
  std::vector<std::pair<std::shared_ptr<Sequence>, int64_t>> work;
  bool empty() const { return admit.empty() && cancelled.empty() && work.empty(); }
};
struct Report {
  std::shared_ptr<Sequence> s;
  int64_t left = 0;       // tokens not yet run (1 = decoding)
  int64_t prefilled = 0;  // tokens run
};
// What a step did, for the scheduler: the sequences still running, and those handed back.
struct Outcome {
  std::vector<Report> running;
  std::vector<std::shared_ptr<Sequence>> deferred, preempted;
  int64_t free_pages = 0;  // pool pages free or held only by the prefix cache
};
}  // namespace fathom::engine
