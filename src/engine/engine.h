// The engine: requests enter a queue; every step is planned under a token budget — one
// decode token for every running sequence plus chunked prefill for the waiting ones
// (continuous batching) — admitting sequences while the KV budget allows and preempting
// (dropping the state, recomputing later) the newest one when it runs out; the model runs
// through a ModelRunner (engine/model_runner.h; the engine never sees the model's types),
// the OutputProcessor picks each token and the end, and every stream gets at most one event
// per step.
//
// KV: every sequence's window rings, compressed KV and index keys live in fixed-size pages
// of one kv::PagePool sized by kv_budget_bytes. The prefix cache (kv::PrefixCache) keys
// 128-token prompt blocks by a chained XXH3 hash (previous block's hash, the block's ids, a
// tenant salt); a cached block holds the pages of compressed KV and index keys its tokens
// added (shared, never rewritten) and, by default, the window state at its end (a side
// object), so a hit resumes exactly; a hit backs off to the last block with a side object.
// With swa_bounded_replay no side objects are kept: a hit covers at most
// prompt - window - speculative slots tokens and replays the last window (an approximation).
// Leaf blocks are evicted LRU when the pool needs pages or the cache outgrows
// prefix_cache_bytes. Decoder-side bounded replay (decoder_replay_keep > 0) is an
// approximation, off by default. submit_n() prefills a prompt once and forks the other
// samples from it (shared full pages).
//
// submit(), submit_n(), stats(), health() and the RequestStream methods may be called from any
// thread. Two engine threads: the scheduler (queues, admission choices, the batch plan) and
// the executor (every model call, the sequence states, the page pool's allocations, the
// prefix cache, sampling and the token events); with a store, the prefetcher's thread reads
// queued requests' blocks (engine/store_prefetch.h). With async_scheduling the scheduler plans
// step n+1 while the executor computes step n. Locks are taken per step, not per token: one
// lock and one wake-up per stream per step, and no allocation per token once buffers have
// grown (the step's head buffers and each stream's event slots are reused).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "engine/draft_scheduler.h"
#include "engine/generator.h"
#include "engine/grammar_masks.h"
#include "engine/kv_reservations.h"
#include "engine/model_runner.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/store_prefetch.h"
#include "kv/kv_event_log.h"
#include "kv/page_pool.h"
#include "kv/prefix_cache.h"
#include "kv/store.h"

namespace fathom::engine {

struct EngineOptions {
  int64_t max_step_tokens = 256;                  // token budget of one step (decode + prefill)
  int64_t max_running = 64;                       // sequences decoding at once
  int64_t kv_budget_bytes = int64_t(4) << 30;     // the page pool: running and cached KV
  int64_t prefix_cache_bytes = int64_t(1) << 30;  // pages the prefix cache may hold
  int64_t prefix_block = 128;
  bool prefix_cache = true;
  // By default each cached block keeps the sliding-window state at its end (a side object of
  // about window x head_dim x layers floats), so a hit resumes exactly: the output of a hit
  // equals the output of a cold run. A hit whose last block has no side object backs off to
  // the last block that has one. swa_bounded_replay = true keeps no side objects and replays
  // the last window instead (SWA bounded replay: cheaper, an approximation — a hit may change
  // the output).
  bool swa_bounded_replay = false;
  // Tokens a hit leaves to compute besides the window (DSpark's gamma + 1 verify slots).
  int64_t speculative_slots = 6;
  // Decoder-side SWA bounded replay: the layers after the last kv source prefill only the
  // prompt's last `decoder_replay_keep` tokens (140 for V4.1). 0 = off (exact).
  int64_t decoder_replay_keep = 0;
  // Plan step n+1 on the scheduler thread while the executor computes step n.
  bool async_scheduling = true;
  // DSpark speculative decoding: each decoding sequence's step drafts up to this many tokens
  // with the model's draft stages and verifies them with its next token in one forward
  // (0 = off; at most the model's draft block). A draft token is kept while it equals the
  // token the request samples at its position from the verify row — the same keyed draw it
  // would make without speculation — so the output is the output without speculation, greedy
  // or seeded, token for token; rows after the first mismatch are dropped from the state.
  int64_t speculative_tokens = 0;
  // How many of them a step verifies (engine/draft_scheduler.h): every one (kFixed), or the
  // prefix scheduler's choice from the drafts' confidence and verify costs profiled at start
  // (kPrefix; it verifies none when speculation would lose on this machine).
  DraftSchedule speculative_schedule = DraftSchedule::kFixed;
  // The KV store below the prefix cache (kv/store.h; e.g. the disk tier), or null. Not owned:
  // it must outlive the engine. A prompt whose blocks are not all in the prefix cache looks
  // there before computing; every prompt block the engine caches is written there too (with
  // the window side objects at the prompt's last block and at its own hit boundary), queued
  // off the step.
  kv::Store* store = nullptr;
  // With a store: a submitted request's prompt blocks past what the prefix cache holds are read
  // from the store on a thread of their own while it queues (engine/store_prefetch.h); its
  // admission decodes those bytes and reads the rest as without it.
  bool store_prefetch = true;
  // Structured outputs: a step's grammar masks are computed on a thread of their own while the
  // forward runs (engine/grammar_masks.h); off, each is computed before its token is sampled.
  // The tokens are the same either way.
  bool grammar_masks_ahead = true;
  // Structured outputs, opt-in: when the grammar forces the next bytes (a JSON key, a literal),
  // they are emitted without sampling, as the longest tokens that spell them, run with the
  // step's next token as one exact multi-row forward (the speculative verify path; at most
  // grammar_jump_tokens a step). The text is what the grammar forces either way; the tokens
  // may differ from those the model would sample (SGLang's jump-forward), so it is off by
  // default.
  bool grammar_jump_forward = false;
  int64_t grammar_jump_tokens = 16;
  // The prefix cache's event feed (kv/kv_event_log.h, served as /v1/kv_events): the block
  // changes its ring keeps for followers. 0 = no feed.
  int64_t kv_event_ring = 65536;
  // The most prompt + generated tokens of one request (vLLM's --max-model-len): 0 = the
  // model's context length; a value above it is clamped to it.
  int64_t max_model_len = 0;
};

struct EngineStats {
  int64_t waiting = 0, running = 0, steps = 0, step_tokens_last = 0, batch_size_last = 0;
  int64_t kv_bytes = 0, kv_budget_bytes = 0, prefix_cache_bytes = 0, prefix_blocks = 0;
  int64_t kv_pages_used = 0, kv_pages_total = 0, kv_page_bytes = 0, replayed_tokens = 0;
  int64_t kv_pages_peak = 0;  // the most pages in use at the end of a step
  // Where the engine thread's time goes (seconds, cumulative): planning the step (admission,
  // batch, pages), the model bodies, the batched head, sampling, and the rest (events,
  // stop checks, cache inserts, stats).
  double plan_seconds = 0, body_seconds = 0, head_seconds = 0, sample_seconds = 0, post_seconds = 0;
  // Structured outputs: the time the executor waited after the head for the mask worker, the
  // masked (sampled under a grammar) tokens, and of them those whose mask was computed ahead,
  // beside the forward.
  double mask_wait_seconds = 0;
  int64_t grammar_masks = 0, grammar_masks_ahead = 0;
  // Jump-forward: steps that emitted forced tokens, and the tokens.
  int64_t grammar_jump_steps = 0, grammar_jump_tokens = 0;
  int64_t requests_finished = 0, prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0,
          preemptions = 0;
  // Speculative decoding: sequence steps that verified drafts, draft tokens verified, of them
  // accepted, and the steps by accepted drafts (0..8).
  int64_t spec_steps = 0, spec_verified_tokens = 0, spec_accepted_tokens = 0;
  std::array<int64_t, 9> spec_accepted_hist{};
  // Draft tokens the stages proposed to the scheduler, and the sequence steps that drafted by
  // how many of them the scheduler chose to verify (K, 0 included).
  int64_t spec_draft_tokens = 0;
  std::array<int64_t, 9> spec_chosen_hist{};
  // The draft scheduler's cost table: seconds of a step's pass by rows (profiled at start).
  std::vector<DraftScheduler::CostPoint> spec_cost;
  // Seconds of drafting by sequences drafting together (`rows` = sequences).
  std::vector<DraftScheduler::CostPoint> spec_draft_cost;
  // The KV store (when there is one): blocks read from it into the prefix cache; admissions that
  // looked past the prefix cache and found nothing to use; objects that failed their checks (each
  // recomputed and removed from the store); the tier's own counters.
  bool store_on = false;
  int64_t store_hit_blocks = 0, store_misses = 0, store_corrupt = 0;
  int64_t store_prefetched_blocks = 0;   // of store_hit_blocks, read while the request queued
  int64_t store_prefetched_windows = 0;  // window side objects of hits read while it queued
  std::vector<std::pair<std::string, kv::StoreStats>> store_tiers;  // by tier: "disk", "redis"
};

class Engine : public Generator, public KvReserver {
 public:
  // `runner` (the model) must outlive the engine. `eos_id` < 0: no EOS.
  Engine(const ModelRunner& runner, EngineOptions options, int32_t eos_id);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; kInvalidArgument for an empty prompt, ids outside the vocabulary or
  // out-of-range options; kResourceExhausted for a prompt the KV pool can never hold.
  Result<std::shared_ptr<RequestStream>> submit(GenerationRequest request);
  // n samples of one prompt (1 <= n <= 128); element i is choice i (sample_index i). The prompt
  // is prefilled once: when its prefill completes, the other n - 1 sequences are forked from
  // it (they share its full KV pages; windows and partial pages are copied) and all n sample
  // their first token from the same logits. Seeded, sample i draws random numbers keyed by
  // (seed, i, position), so the n choices differ from each other but repeat exactly run to
  // run, alone or under load: choice i equals submit() of the same request with
  // sample_index = i. A sibling the pool has no pages for at the fork runs on its own later.
  Result<std::vector<std::shared_ptr<RequestStream>>> submit_n(GenerationRequest request,
                                                               int n) override;
  // The model's maximum positions (for a max_tokens default and cap).
  int64_t context_length() const override;
  // The size of the model's logits row (a structured-output token table's vocabulary).
  int64_t vocab_size() const override { return vocab_; }
  // alive: the engine threads run (not shut down); stalled: work pending and no step finished
  // for that long. May be called from any thread (one lock).
  Health health() const override;
  EngineStats stats() const;
  // stats() as Prometheus text (engine_metrics.cc).
  std::string metrics_text() const override;
  // Stops the engine thread; in-flight requests finish with kCancelled.
  void shutdown();
  // The prefix cache's block stored / removed events (published once a step), or null without
  // a prefix cache or with kv_event_ring 0. Lives as long as the engine; any thread may read it.
  const kv::KvEventLog* kv_events() const { return kv_events_.get(); }
  // KV held for P/D hand-offs (engine/kv_reservations.h): the pages of a fresh sequence of
  // prompt + max_tokens (capped at the context), against the pool's free pages plus those of
  // cached prefix blocks (evicted on demand), less the admission watermark.
  Result<uint64_t> reserve_kv(std::span<const int32_t> prompt, uint64_t salt, int64_t max_tokens,
                              KvReservations::Clock::time_point until) override;
  void release_kv(uint64_t id) override { reservations_.release(id); }
  int64_t reserved_kv_pages() const override { return reservations_.held(); }

 private:
  // The scheduler thread: hands the Scheduler's plans to the executor and its outcomes back.
  void scheduler_loop();
  void submit(Plan p);
  Outcome wait_outcome();
  void apply(Outcome out);
  void executor_loop();
  Outcome execute(Plan& plan, std::vector<std::shared_ptr<Sequence>>& running);
  void admit(Sequence& s);
  // Caches the block the sequence's prefill just completed; `pages_promised` are pages the
  // rest of the step needs, which a side object may not take.
  void cache_insert(const Sequence& s, int64_t pages_promised);
  // Extends the prefix cache's chain for `s` (at most max_blocks blocks) from the store: the
  // blocks after it that the store holds, up to the deepest one with a window side object.
  // Sets s.store_unread_from and s.store_read_first/last.
  void load_from_store(Sequence& s, int64_t max_blocks);
  // The prompt blocks a resume of `s` may cover (the hit rule), at most its full blocks.
  int64_t resumable_blocks(const Sequence& s) const;
  // The leading blocks of `hashes` the prefix cache holds (l1_view_; any thread).
  int64_t l1_chain(std::span<const uint64_t> hashes);
  // Starts the store reads of `s`'s blocks past the prefix cache's chain (l1_view_).
  void prefetch(const Sequence& s);
  // Queues block `b` (1-based) of `s`'s prompt, just cached as `block`, for the store:
  // `computed` by this sequence, or cached before and given its window side object now.
  void store_block(const Sequence& s, int64_t b, const CachedBlock& block, bool computed);
  kv::ObjectHeader store_header(const Sequence& s, int64_t b, kv::ObjectKind kind) const;
  // Decodes with room: a full pool evicts cached blocks and tries again.
  Result<std::unique_ptr<CachedBlock>> decode_block(const std::string& bytes,
                                                    const kv::ObjectHeader& h,
                                                    std::span<const int32_t> ids);
  // A store object that failed its checks: logged, counted, removed.
  void store_corrupt(const kv::ObjectHeader& h, const Status& why);
  // One more damaged store object in the stats (the executor's; takes mu_).
  void count_store_corrupt();
  // Ends a request: its final event (carrying the step's tokens not yet sent) and its state.
  void finish(Sequence& s, FinishCause cause, Status error = Status::ok());
  // Sends the step's pending tokens of `s` as one event.
  void flush(Sequence& s);
  // The next token of `s` from its logits row (`row` may be masked in place by a grammar): added
  // to the sequence and its pending event; the cause when the request ends with it (kNone:
  // it goes on).
  FinishCause append_token(Sequence& s, float* row, int32_t* token);
  // A verified speculative step of `s`: its rows' logits (verify() of its next token and
  // `drafts`) give tokens while they match the drafts; the state keeps the rows that matched.
  // Returns the drafts accepted, or -1 when the request ended with an error.
  int64_t accept_drafts(Sequence& s, float* logits, std::span<const int32_t> drafts);
  // Rows a decoding sequence may verify after its next token: at most `want`, never past
  // max_tokens, and no more than the model verifies exactly at its position.
  int64_t rows_after_next(const Sequence& s, int64_t want) const;
  // Grammar jump-forward: fills s.jump with the tokens the grammar forces after the next one
  // (at most what max_tokens and the model's exact verify rows leave); returns how many.
  int64_t jump_forward(Sequence& s);
  // Forks the n - 1 siblings of `s`, whose prefill just completed with its last hidden row at
  // hidden_[row]: each joins `running` and `heads` with a copy of that row; one the pool has
  // no pages for goes to `deferred`, to run on its own.
  void fork_siblings(Sequence& s, size_t row, int64_t pages_promised,
                     std::vector<std::shared_ptr<Sequence>>& running, std::vector<Sequence*>& heads,
                     std::vector<std::shared_ptr<Sequence>>& deferred);
  Result<std::shared_ptr<Sequence>> make_sequence(GenerationRequest request);
  // The pages held for hand-offs other than `s`'s (0 when none are held).
  int64_t held_for_others(const Sequence& s) const;
  // `s` is admitted, or ends before it was: the hold for it, if any, ends.
  void end_hold(const Sequence& s);

  const ModelRunner& runner_;
  EngineOptions opt_;
  int64_t vocab_;
  bool cache_on_ = false;                 // prefix caching possible with this block size and pool
  std::unique_ptr<kv::PagePool> pool_;    // before cache_: cached blocks go first
  KvReservations reservations_;           // any thread; before scheduler_, which reads it
  std::unique_ptr<Scheduler> scheduler_;  // scheduler thread (chunk_size: any thread)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Sequence>> incoming_;  // guarded by mu_
  bool stop_ = false;                                // guarded by mu_
  EngineStats stats_;                                // guarded by mu_
  uint64_t next_id_ = 1;                             // guarded by mu_
  kv::PrefixCache cache_;                            // executor only
  kv::Fingerprint fingerprint_;                      // the runner's, for the store
  OutputProcessor output_;                           // executor only
  std::vector<float> hidden_, logits_;               // executor only: the step's head rows, reused
  std::vector<float> spec_logits_;                   // executor only: verify rows' logits, reused
  std::unique_ptr<DraftScheduler> draft_sched_;      // executor only; with speculative_tokens
  GrammarMaskWorker masks_;                          // executor only: masks beside the forward
  int64_t stats_generated_in_step_ = 0;              // executor only: tokens the step generated
  int64_t stats_masks_in_step_ = 0, stats_masks_ahead_in_step_ = 0;  // executor only
  // executor only: siblings whose leader was cancelled before its prefill completed
  std::vector<std::shared_ptr<Sequence>> orphans_;
  // The prefix cache's event feed and the step's changes not yet published to it (the
  // executor's; published at the end of a step without waiting for a reader, else when idle).
  std::unique_ptr<kv::KvEventLog> kv_events_;
  std::vector<kv::KvBlockChange> kv_pending_;  // executor only
  // The hashes cache_ holds, kept by its observer for submit()'s prefetch and the scheduler's
  // admissions (any thread).
  std::mutex l1_mu_;
  std::unordered_set<uint64_t> l1_view_;                 // guarded by l1_mu_
  std::unique_ptr<StorePrefetcher> prefetch_;            // with a store and store_prefetch
  std::chrono::steady_clock::time_point last_progress_;  // guarded by mu_: last step or idle
  // Handoff between the scheduler and the executor: one plan in, one outcome out per step.
  std::mutex hmu_;
  std::condition_variable hcv_;
  std::optional<Plan> plan_;          // guarded by hmu_
  std::optional<Outcome> outcome_;    // guarded by hmu_
  bool exec_stop_ = false;            // guarded by hmu_
  std::optional<Plan> current_plan_;  // scheduler only: the plan in flight
  std::thread executor_, thread_;
};

}  // namespace fathom::engine
