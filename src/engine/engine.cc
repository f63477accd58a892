#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>

#include "core/log.h"

namespace fathom::engine {

using Clock = std::chrono::steady_clock;

bool RequestStream::pop(StreamEvent* ev) {
  if (count_ == 0) return false;
  // A swap: the consumer's previous buffers go back to the slot for the next push.
  std::swap(*ev, ring_[head_]);
  head_ = (head_ + 1) % ring_.size();
  --count_;
  return true;
}

bool RequestStream::next(StreamEvent* ev, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return count_ > 0; }))
    return false;
  return pop(ev);
}

bool RequestStream::try_next(StreamEvent* ev) {
  std::lock_guard<std::mutex> lock(mu_);
  return pop(ev);
}

void RequestStream::set_waker(std::function<void()> waker) {
  std::shared_ptr<const std::function<void()>> now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waker_ = waker ? std::make_shared<const std::function<void()>>(std::move(waker)) : nullptr;
    if (count_ > 0) now = waker_;
  }
  if (now) (*now)();
}

void RequestStream::push(const StreamEvent& ev) {
  std::shared_ptr<const std::function<void()>> wake;  // a counted copy: no allocation
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (count_ == ring_.size()) {
      std::vector<StreamEvent> bigger(std::max<size_t>(4, ring_.size() * 2));
      for (size_t i = 0; i < count_; ++i) std::swap(bigger[i], ring_[(head_ + i) % ring_.size()]);
      ring_.swap(bigger);
      head_ = 0;
    }
    ring_[(head_ + count_) % ring_.size()] = ev;  // copies into the slot's buffers
    ++count_;
    wake = waker_;
  }
  cv_.notify_all();
  if (wake) (*wake)();
}

namespace {
// The draft schedulers' cost tables, each point the median of 5 runs at a decoding position
// past the window (rows verified are then dropped; drafting leaves no trace): seconds of a
// step's pass by rows — a verify call of n = 1..rows rows (a sequence speculating alone), and
// batched passes of m = 2, 4, 8 (at most `sequences`) copies of that sequence verifying `rows`
// rows each with the head over all rows — and seconds of drafting for m = 1, 2, 4, 8 copies.
struct CostTables {
  std::vector<DraftScheduler::CostPoint> pass, draft;
};
CostTables profile_costs(const ModelRunner& r, kv::PagePool* pool, int64_t rows,
                         int64_t sequences) {
  CostTables cost;
  auto s = r.new_sequence(pool);
  const int64_t prompt_len = r.window_size() + rows + 8;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int64_t i = 0; i < prompt_len; ++i) prompt[size_t(i)] = int32_t(1 + i % 97);
  r.set_prompt_end(*s, prompt_len);
  if (!r.forward(*s, prompt, nullptr).is_ok() || r.max_verify_rows(*s, rows) < rows) return cost;
  using Clock = std::chrono::steady_clock;
  // The median of 5 runs of `run` (false: stop profiling).
  auto median5 = [](auto&& run, double* seconds) {
    std::vector<double> t;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = Clock::now();
      if (!run()) return false;
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    *seconds = t[2];
    return true;
  };
  std::vector<float> logits(size_t(8 * rows * r.vocab_size()));
  for (int64_t n = 1; n <= rows; ++n) {
    double sec = 0;
    if (!median5(
            [&] {
              return r.verify(*s, std::span(prompt).first(size_t(n)), logits.data()).is_ok() &&
                     r.keep_rows(*s, 0).is_ok();
            },
            &sec))
      return cost;
    cost.pass.push_back({n, sec});
  }
  std::vector<std::unique_ptr<RunnerSequence>> copies;
  const std::span<const int32_t> rows_of_each = std::span(prompt).first(size_t(rows));
  for (int64_t m = 1; m <= std::min<int64_t>(8, sequences); m *= 2) {
    while (int64_t(copies.size()) < m - 1) {
      auto c = r.fork(*s);
      if (!c.is_ok()) return cost;  // the pool is too small for more
      copies.push_back(std::move(*c));
    }
    std::vector<RunnerSequence*> states = {s.get()};
    for (int64_t i = 0; i < m - 1; ++i) states.push_back(copies[size_t(i)].get());
    if (r.draft_block_size() > 0) {
      const std::vector<int32_t> main(size_t(m), prompt[0]);
      std::vector<std::vector<int32_t>> ids(static_cast<size_t>(m));
      std::vector<std::vector<float>> conf(static_cast<size_t>(m));
      double sec = 0;
      if (!median5(
              [&] {
                for (const Status& st : r.draft_each(states, main, ids, conf))
                  if (!st.is_ok()) return false;
                return true;
              },
              &sec))
        return cost;
      cost.draft.push_back({m, sec});
    }
    if (m == 1) continue;
    const std::vector<std::span<const int32_t>> chunks(size_t(m), rows_of_each);
    const std::unique_ptr<bool[]> verify(new bool[size_t(m)]);
    std::fill_n(verify.get(), m, true);
    std::vector<float> hidden(size_t(m * rows * r.hidden_size()));
    double sec = 0;
    if (!median5(
            [&] {
              const std::vector<Status> st = r.forward_each(
                  states, chunks, hidden.data(), std::span<const bool>(verify.get(), size_t(m)));
              r.head_logits(hidden.data(), m * rows, logits.data());
              bool ok = true;
              for (size_t i = 0; i < states.size(); ++i)
                ok = st[i].is_ok() && r.keep_rows(*states[i], 0).is_ok() && ok;
              return ok;
            },
            &sec))
      return cost;
    cost.pass.push_back({m * rows, sec});
  }
  return cost;
}
}  // namespace

Engine::Engine(const ModelRunner& runner, EngineOptions options, int32_t eos_id)
    : runner_(runner),
      opt_(options),
      vocab_(runner.vocab_size()),
      output_(eos_id, runner.vocab_size()) {
  // Pages hold whole prefix blocks of every kv source: entries per page = block / alignment.
  const int64_t ratios = runner.block_alignment();
  const int64_t B = opt_.prefix_block;
  cache_on_ = opt_.prefix_cache && B > 0 && B % ratios == 0;
  const int64_t entries = cache_on_ ? B / ratios : 64;
  const int64_t page = runner.page_bytes(entries);
  pool_ = std::make_unique<kv::PagePool>(page, std::max<int64_t>(1, opt_.kv_budget_bytes / page));
  stats_.kv_budget_bytes = pool_->max_pages() * pool_->page_bytes();
  stats_.kv_pages_total = pool_->max_pages();
  stats_.kv_page_bytes = pool_->page_bytes();
  if (!cache_on_) opt_.store = nullptr;
  opt_.speculative_tokens =
      std::clamp<int64_t>(opt_.speculative_tokens, 0,
                          std::min<int64_t>(runner.draft_block_size(), DraftScheduler::kMaxDrafts));
  if (opt_.speculative_tokens > 0) {
    CostTables cost;
    if (opt_.speculative_schedule != DraftSchedule::kFixed)
      cost = profile_costs(runner, pool_.get(), opt_.speculative_tokens + 1, opt_.max_running);
    draft_sched_ =
        std::make_unique<DraftScheduler>(opt_.speculative_schedule, opt_.speculative_tokens,
                                         std::move(cost.pass), std::move(cost.draft));
    stats_.spec_cost = draft_sched_->cost_points();
    stats_.spec_draft_cost = draft_sched_->draft_cost_points();
  }
  stats_.store_on = opt_.store != nullptr;
  if (opt_.store) fingerprint_ = runner.fingerprint();
  // The hashes the prefix cache holds, for the scheduler (a request waits for blocks another
  // is computing) and the store's prefetch.
  const bool l1_view = cache_on_;
  if (cache_on_ && opt_.kv_event_ring > 0) {
    kv_events_ = std::make_unique<kv::KvEventLog>(size_t(opt_.kv_event_ring));
    kv_pending_.reserve(1024);
  }
  if (l1_view || kv_events_) {
    cache_.set_observer([this, l1_view](uint64_t hash, uint64_t parent, bool cached) {
      // Per block, not per token: appended to the step's batch (a reused buffer).
      if (kv_events_)
        kv_pending_.push_back(
            {hash, parent, cached ? kv::KvEventKind::kStored : kv::KvEventKind::kRemoved});
      if (!l1_view) return;
      std::lock_guard<std::mutex> lock(l1_mu_);
      if (cached)
        l1_view_.insert(hash);
      else
        l1_view_.erase(hash);
    });
  }
  if (opt_.store && opt_.store_prefetch)
    prefetch_ = std::make_unique<StorePrefetcher>(opt_.store, StorePrefetcher::Limits{});
  SchedulerOptions so;
  so.max_step_tokens = opt_.max_step_tokens;
  so.max_running = opt_.max_running;
  so.prefix_block = opt_.prefix_block;
  so.chunk_at_blocks = cache_on_;
  Scheduler::PrefixView prefix;
  if (l1_view) {
    prefix.cached_chain = [this](std::span<const uint64_t> hashes) { return l1_chain(hashes); };
    // Reads only the sequence's tokens and immutable options.
    prefix.resumable_blocks = [this](const Sequence& s) { return resumable_blocks(s); };
  }
  scheduler_ =
      std::make_unique<Scheduler>(runner_, pool_.get(), so, &reservations_, std::move(prefix));
  executor_ = std::thread([this] { executor_loop(); });
  thread_ = std::thread([this] { scheduler_loop(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<uint64_t> Engine::reserve_kv(std::span<const int32_t> prompt, uint64_t salt,
                                    int64_t max_tokens, KvReservations::Clock::time_point until) {
  if (prompt.empty() || max_tokens < 0) return invalid_argument("an empty prompt or max_tokens");
  const int64_t tokens = std::min<int64_t>(int64_t(prompt.size()) + max_tokens, context_length());
  const int64_t pages = runner_.pages_needed(*runner_.new_sequence(pool_.get()), tokens);
  int64_t cached_pages = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cached_pages = stats_.prefix_cache_bytes / pool_->page_bytes();
  }
  const int64_t free_pages =
      pool_->available() + cached_pages - pool_->max_pages() / 100;  // the admission watermark
  return reservations_.hold(KvReservations::key_of(prompt, salt), pages, free_pages, until);
}

int64_t Engine::held_for_others(const Sequence& s) const {
  if (reservations_.empty()) return 0;
  return reservations_.held_except(KvReservations::key_of(s.req.prompt, s.req.cache_salt));
}

void Engine::end_hold(const Sequence& s) {
  if (!reservations_.empty())
    reservations_.claim(KvReservations::key_of(s.req.prompt, s.req.cache_salt));
}

Result<std::shared_ptr<Sequence>> Engine::make_sequence(GenerationRequest request) {
  if (request.prompt.empty()) return invalid_argument("the prompt has no tokens");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= vocab_)
      return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary");
  if (request.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  for (int32_t t : request.forced_output)
    if (t < 0 || t >= vocab_) return invalid_argument("forced output id outside the vocabulary");
  for (int32_t t : request.resume_output)
    if (t < 0 || t >= vocab_) return invalid_argument("resumed output id outside the vocabulary");
  if (!request.resume_output.empty() && int64_t(request.resume_output.size()) >= request.max_tokens)
    return invalid_argument("the resumed output leaves no room under max_tokens");
  if (int64_t(request.prompt.size()) + request.max_tokens > context_length())
    return invalid_argument("the prompt's " + std::to_string(request.prompt.size()) +
                            " tokens and max_tokens " + std::to_string(request.max_tokens) +
                            " exceed the context length, " + std::to_string(context_length()));
  if (request.top_logprobs < -1 || request.top_logprobs > kMaxTopLogprobs)
    return invalid_argument("top_logprobs must be between 0 and 20");
  if (request.think_end_id < -1 || request.think_end_id >= vocab_)
    return invalid_argument("think_end_id outside the vocabulary");
  FATHOM_RETURN_IF_ERROR(OutputProcessor::prepare_logit_controls(&request, vocab_));
  // The first sequence is always admitted; one whose prompt alone needs more pages than the
  // pool has would fail after its admission anyway.
  if (runner_.pages_needed(*runner_.new_sequence(pool_.get()), int64_t(request.prompt.size())) >
      pool_->max_pages())
    return Status(StatusCode::kResourceExhausted,
                  "the prompt needs more KV than the engine's whole budget");
  auto s = std::make_shared<Sequence>();
  s->stream = std::make_shared<RequestStream>();
  s->submitted = Clock::now();
  const size_t reserve = size_t(std::min<int64_t>(request.max_tokens, 4096));
  s->all.reserve(request.prompt.size() + reserve);
  s->all = request.prompt;
  s->generated.reserve(reserve);
  if (!request.resume_output.empty()) {
    // As a preempted sequence: `generated` so far, recomputed one decode step per token.
    s->all.insert(s->all.end(), request.resume_output.begin(), request.resume_output.end());
    s->generated = request.resume_output;
    s->think_ended = request.think_end_id >= 0 &&
                     std::find(s->generated.begin(), s->generated.end(), request.think_end_id) !=
                         s->generated.end();
    if (Status st = OutputProcessor::check_resumed(request, s->generated); !st.is_ok()) return st;
  }
  s->resume_hint = int64_t(s->all.size());
  s->req = std::move(request);
  return s;
}

Result<std::shared_ptr<RequestStream>> Engine::submit(GenerationRequest request) {
  auto r = submit_n(std::move(request), 1);
  if (!r.is_ok()) return r.status();
  return std::move((*r)[0]);
}

Result<std::vector<std::shared_ptr<RequestStream>>> Engine::submit_n(GenerationRequest request,
                                                                     int n) {
  if (n < 1 || n > 128) return invalid_argument("n must be between 1 and 128");
  if (n > 1 && !request.resume_output.empty())
    return invalid_argument("a resumed output needs n = 1");
  std::vector<std::shared_ptr<Sequence>> seqs;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r = i + 1 < n ? request : std::move(request);
    if (n > 1) r.sample_index = i;
    FATHOM_ASSIGN_OR_RETURN(auto s, make_sequence(std::move(r)));
    seqs.push_back(std::move(s));
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& s : seqs) streams.push_back(s->stream);
  std::shared_ptr<Sequence> lead = seqs[0];
  // Hashed here, once, for every reader: the prefetch, the scheduler (while it waits) and the
  // executor (its samples share the prompt).
  if (cache_on_) {
    lead->block_hashes =
        kv::prefix_block_hashes(lead->req.prompt, opt_.prefix_block, lead->req.cache_salt);
    for (size_t i = 1; i < seqs.size(); ++i) seqs[i]->block_hashes = lead->block_hashes;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kResourceExhausted, "the engine is shutting down");
    for (auto& s : seqs) {
      s->id = next_id_++;
      if (!s->req.seeded) s->req.sampling.seed = std::random_device{}() ^ (uint64_t(s->id) << 32);
    }
    seqs[0]->siblings.assign(seqs.begin() + 1, seqs.end());
    if (stats_.waiting == 0 && stats_.running == 0 && incoming_.empty())
      last_progress_ = Clock::now();  // idle until now: a stall counts from here
    // Started before the scheduler can see it: its admission takes what was read.
    if (prefetch_) prefetch(*lead);
    incoming_.push_back(std::move(seqs[0]));
    ++stats_.waiting;
  }
  cv_.notify_all();
  return streams;
}

int64_t Engine::context_length() const {
  const int64_t model = runner_.context_length();
  return opt_.max_model_len > 0 ? std::min(opt_.max_model_len, model) : model;
}

Engine::Health Engine::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  Health h;
  h.alive = !stop_;
  if (stats_.waiting > 0 || stats_.running > 0 || !incoming_.empty())
    h.stalled_seconds = std::chrono::duration<double>(Clock::now() - last_progress_).count();
  return h;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  if (opt_.store) s.store_tiers = opt_.store->tier_stats();
  return s;
}

void Engine::flush(Sequence& s) {
  StreamEvent& ev = s.pending;
  if (ev.tokens.empty() && !ev.finished) return;
  s.stream->push(ev);
  ev.tokens.clear();
  ev.logprobs.clear();
  ev.finished = false;
  ev.cause = FinishCause::kNone;
  ev.error = Status::ok();
  ev.queue_seconds = ev.first_token_seconds = 0;
}

FinishCause Engine::append_token(Sequence& s, float* row, int32_t* token) {
  const int64_t g = int64_t(s.generated.size());
  if (OutputProcessor::error_due(s.req, g)) {
    finish(s, FinishCause::kError,
           internal_error("injected error after " + std::to_string(g) + " tokens"));
    return FinishCause::kError;
  }
  StreamEvent& ev = s.pending;
  TokenLogprob* lp = nullptr;
  if (s.req.top_logprobs >= 0) lp = &ev.logprobs.emplace_back();
  // The mask the worker computed for this token, if any (grammar_masks.h).
  const uint32_t* premask = nullptr;
  if (s.matcher && g - s.mask_base >= 0 && g - s.mask_base < s.mask_rows)
    premask = s.masks.data() + size_t(g - s.mask_base) * s.matcher->mask_words();
  // A jump-forward token of this step is emitted as it is.
  const int32_t jump = g - s.jump_base >= 0 && g - s.jump_base < int64_t(s.jump.size())
                           ? s.jump[size_t(g - s.jump_base)]
                           : -1;
  if (OutputProcessor::constrained(s.req, s.think_ended) &&
      OutputProcessor::samples(s.req, g, s.think_ended) && jump < 0) {
    ++stats_masks_in_step_;
    stats_masks_ahead_in_step_ += premask != nullptr;
  }
  const int32_t tok =
      output_.next_token(s.req, s.req.seeded ? uint64_t(s.req.sample_index) : s.id, s.generated,
                         s.think_ended, row, lp, &s.matcher, premask, jump);
  if (tok < 0) {
    if (lp) ev.logprobs.pop_back();
    finish(s, FinishCause::kError,
           invalid_argument("the request's grammar and logits controls (allowed_token_ids, "
                            "bad_words, min_tokens) leave no token to sample at output position " +
                            std::to_string(g)));
    return FinishCause::kError;
  }
  if (tok == s.req.think_end_id) s.think_ended = true;
  s.generated.push_back(tok);
  s.all.push_back(tok);
  ++stats_generated_in_step_;
  ev.tokens.push_back(tok);
  ev.prompt_tokens = int64_t(s.req.prompt.size());
  ev.cached_tokens = s.cached;
  ev.completion_tokens = int64_t(s.generated.size());
  if (!s.first_sent) {
    s.first_sent = true;
    ev.first_token_seconds = std::chrono::duration<double>(Clock::now() - s.submitted).count();
  }
  *token = tok;
  return output_.stop_cause(s.req, s.generated, s.matcher && s.matcher->is_terminated());
}

int64_t Engine::rows_after_next(const Sequence& s, int64_t want) const {
  // Never past max_tokens, and as many rows as the model verifies exactly at its position.
  int64_t rows = std::min(want, s.req.max_tokens - int64_t(s.generated.size()) - 1);
  if (rows > 0) rows = runner_.max_verify_rows(*s.state, rows + 1) - 1;
  return std::max<int64_t>(0, rows);
}

int64_t Engine::jump_forward(Sequence& s) {
  const int64_t g = int64_t(s.generated.size());
  if (!s.req.grammar || !OutputProcessor::samples(s.req, g, s.think_ended)) return 0;
  // Where the logits controls may ban or weigh a token, the grammar's only tokens are sampled,
  // not jumped over: the output is what it would be without jump-forward.
  if (!s.req.allowed_token_ids.empty() || !s.req.bad_words.empty() || g < s.req.min_tokens ||
      !s.req.logit_bias.empty())
    return 0;
  grammar::GrammarMatcher* m =
      OutputProcessor::matcher_for(s.req, s.generated, s.think_ended, &s.matcher);
  if (!m || m->is_terminated()) return 0;
  const int64_t most = rows_after_next(s, opt_.grammar_jump_tokens);
  if (most == 0) return 0;
  s.jump = m->jump_forward_tokens(size_t(most));
  // Only where the request itself would sample (not a forced or budgeted position).
  size_t k = 0;
  while (k < s.jump.size() && OutputProcessor::samples(s.req, g + int64_t(k) + 1, s.think_ended))
    ++k;
  s.jump.resize(k);
  s.jump_base = g;
  return int64_t(k);
}

int64_t Engine::accept_drafts(Sequence& s, float* logits, std::span<const int32_t> drafts) {
  // Row k holds the logits after the next token and drafts[0..k): the token the request
  // samples there is what it would sample without speculation; a draft equal to it is
  // accepted (its row already ran), the first one that differs ends the step.
  int64_t kept = 0;
  FinishCause cause = FinishCause::kNone;
  for (size_t k = 0; k <= drafts.size(); ++k) {
    int32_t tok = 0;
    cause = append_token(s, logits + k * size_t(vocab_), &tok);
    if (s.done) return -1;  // an injected error
    ++kept;
    if (cause != FinishCause::kNone || k == drafts.size() || tok != drafts[k]) break;
  }
  // Rows kept: the next token and the accepted drafts; the last token sampled runs next.
  const int64_t accepted = kept - 1;
  if (cause != FinishCause::kNone) {
    finish(s, cause);
    return accepted;
  }
  const Status st = runner_.keep_rows(*s.state, kept);
  if (!st.is_ok()) {
    finish(s, FinishCause::kError, st);
    return -1;
  }
  s.prefilled += kept;
  flush(s);
  return accepted;
}

void Engine::finish(Sequence& s, FinishCause cause, Status error) {
  StreamEvent& ev = s.pending;
  ev.finished = true;
  ev.cause = cause;
  ev.error = error;
  ev.prompt_tokens = int64_t(s.req.prompt.size());
  ev.cached_tokens = s.cached;
  ev.completion_tokens = int64_t(s.generated.size());
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.prompt_tokens += ev.prompt_tokens;
    stats_.cached_tokens += ev.cached_tokens;
    stopping = stop_;
  }
  flush(s);
  s.state.reset();
  s.done = true;
  if (s.siblings.empty()) return;
  std::vector<std::shared_ptr<Sequence>> sibs;
  sibs.swap(s.siblings);
  if (cause == FinishCause::kCancelled && !stopping && s.stream->cancelled()) {
    // The client dropped this sample before the prompt was prefilled: the others go on, led
    // by the next one (the executor hands it back to the queue).
    sibs[0]->siblings.assign(sibs.begin() + 1, sibs.end());
    orphans_.push_back(sibs[0]);
    return;
  }
  for (auto& x : sibs) finish(*x, cause, error);
}

// Resumes from the longest chain of cached blocks the hit rule allows, else starts empty.
void Engine::admit(Sequence& s) {
  s.state = runner_.new_sequence(pool_.get());
  s.matcher.reset();  // rebuilt from `generated` at the next token
  s.jump.clear();
  s.prefilled = 0;
  s.cache_blocks = 0;
  const int64_t B = opt_.prefix_block, L = int64_t(s.all.size());
  const bool side = !opt_.swa_bounded_replay;
  const int64_t max_blocks = resumable_blocks(s);
  s.store_unread_from = std::numeric_limits<int64_t>::max();
  s.store_read_first = 1;
  s.store_read_last = 0;
  if (opt_.store && cache_on_) load_from_store(s, max_blocks);
  const std::vector<const CachedBlock*> chain = cache_.match(s.block_hashes, max_blocks, side);
  if (!chain.empty()) {
    const int64_t P = int64_t(chain.size()) * B;
    auto resumed = runner_.resume(chain, B, std::span(s.all).first(size_t(P)), pool_.get());
    if (resumed.is_ok()) {
      s.state = std::move(*resumed);
      s.prefilled = runner_.position(*s.state);
      s.cache_blocks = int64_t(chain.size());
      if (s.cached == 0) s.cached = P;
    }
  }
  // The prompt's rows are prefill rows in whatever chunks they run (a one-token chunk
  // included: at a block boundary, by the step's budget, or left by a prefix hit).
  runner_.set_prompt_end(*s.state, int64_t(s.req.prompt.size()));
  if (opt_.decoder_replay_keep > 0)
    runner_.set_decoder_tail_start(*s.state, L - opt_.decoder_replay_keep);
}

int64_t Engine::resumable_blocks(const Sequence& s) const {
  // A hit leaves the window and the speculative slots to compute (SWA bounded replay), or
  // at least one token with the exact side objects.
  const int64_t L = int64_t(s.all.size());
  const int64_t limit =
      !opt_.swa_bounded_replay ? L - 1 : L - runner_.window_size() - opt_.speculative_slots;
  return std::max<int64_t>(0, limit) / opt_.prefix_block;
}

int64_t Engine::l1_chain(std::span<const uint64_t> hashes) {
  std::lock_guard<std::mutex> lock(l1_mu_);
  int64_t n = 0;
  while (size_t(n) < hashes.size() && l1_view_.count(hashes[size_t(n)])) ++n;
  return n;
}

void Engine::prefetch(const Sequence& s) {
  const int64_t max_blocks = std::min<int64_t>(resumable_blocks(s), int64_t(s.block_hashes.size()));
  const int64_t l1 = l1_chain(std::span(s.block_hashes).first(size_t(max_blocks)));
  std::vector<kv::StoreKey> keys, window_keys;
  for (int64_t b = l1 + 1; b <= max_blocks; ++b) {
    const uint64_t hash = s.block_hashes[size_t(b - 1)];
    keys.push_back(kv::store_key(fingerprint_, hash, kv::ObjectKind::kBlock));
    if (!opt_.swa_bounded_replay)
      window_keys.push_back(kv::store_key(fingerprint_, hash, kv::ObjectKind::kWindow));
  }
  prefetch_->start(s.id, l1 + 1, std::move(keys), std::move(window_keys), s.req.retention);
}

void Engine::cache_insert(const Sequence& s, int64_t pages_promised) {
  const int64_t B = opt_.prefix_block, b = s.prefilled / B;
  if (b <= s.cache_blocks) return;  // a replayed block: already cached
  const uint64_t hash = s.block_hashes[size_t(b - 1)];
  const uint64_t parent = b > 1 ? s.block_hashes[size_t(b - 2)] : 0;
  const bool side = !opt_.swa_bounded_replay;
  if (cache_.touch(hash)) {
    // Cached without its window state (read back from the store, or dropped for room): it
    // gets it now that a sequence stands at its end again.
    const CachedBlock* have = cache_.find(hash);
    if (!side || have->has_side_object() || pool_->available() < pages_promised) return;
    auto again = runner_.export_block(*s.state, B, true);
    if (!again.is_ok() || !(*again)->has_side_object()) return;
    if (pool_->available() < pages_promised) return;  // the copy took pages promised elsewhere
    const CachedBlock* cached = again->get();
    cache_.replace(hash, std::move(*again));
    if (opt_.store) store_block(s, b, *cached, false);
    return;
  }
  if (b > 1 && !cache_.contains(parent)) return;  // an orphan could never be reached
  auto block = runner_.export_block(*s.state, B, side);
  if (!block.is_ok()) return;
  // A side object may not take pages the rest of the step was promised: without it the block
  // is still a valid chain link.
  if ((*block)->has_side_object() && pool_->available() < pages_promised)
    (*block)->drop_side_object();
  const CachedBlock* cached = block->get();
  cache_.insert(hash, parent, b, std::move(*block));
  if (opt_.store) store_block(s, b, *cached, true);
  while (cache_.bytes() > opt_.prefix_cache_bytes && cache_.evict_one(false)) {
  }
}

kv::ObjectHeader Engine::store_header(const Sequence& s, int64_t b, kv::ObjectKind kind) const {
  kv::ObjectHeader h;
  h.kind = kind;
  h.block_tokens = uint32_t(opt_.prefix_block);
  h.model = fingerprint_;
  h.key = s.block_hashes[size_t(b - 1)];
  h.parent = b > 1 ? s.block_hashes[size_t(b - 2)] : 0;
  h.index = uint32_t(b);
  return h;
}

void Engine::store_block(const Sequence& s, int64_t b, const CachedBlock& block, bool computed) {
  const int64_t B = opt_.prefix_block, P = int64_t(s.req.prompt.size());
  const kv::ObjectHeader h = store_header(s, b, kv::ObjectKind::kBlock);
  const kv::StoreKey key = kv::store_key(h.model, h.key, h.kind);
  // The objects of a block computed at or past the first one whose read failed at admission
  // are written whether or not the store says it holds them: a copy there may be damaged too
  // (only the first damaged one of a chain is seen), and past a miss they are rarely held, so
  // the round trip to ask is saved. A block read at admission (recomputed because no block
  // at or past it had a window side object) is held. Other blocks (past the hit rule's reach)
  // are written where the store lacks them.
  const bool unread = computed && b >= s.store_unread_from;
  const bool read = b >= s.store_read_first && b <= s.store_read_last;
  if (!read && (unread || !opt_.store->contains(key)))
    opt_.store->put(key,
                    runner_.encode_block(
                        block, h, std::span(s.req.prompt).subspan(size_t((b - 1) * B), size_t(B))),
                    s.req.retention);
  // Window side objects (about as large as a block) where a later hit resumes: at the hit
  // boundary of this prompt and at its last block (where a longer prompt that extends it
  // resumes).
  if (!block.has_side_object() || (b != (P - 1) / B && b != P / B)) return;
  const kv::ObjectHeader w = store_header(s, b, kv::ObjectKind::kWindow);
  const kv::StoreKey wkey = kv::store_key(w.model, w.key, w.kind);
  if (!unread && opt_.store->contains(wkey)) return;
  Result<std::string> bytes = runner_.encode_window(block, w);
  if (bytes.is_ok()) opt_.store->put(wkey, std::move(*bytes), s.req.retention);
}

Result<std::unique_ptr<CachedBlock>> Engine::decode_block(const std::string& bytes,
                                                          const kv::ObjectHeader& h,
                                                          std::span<const int32_t> ids) {
  for (;;) {
    auto r = runner_.decode_block(bytes, h, ids, pool_.get());
    if (r.is_ok() || r.status().code() != StatusCode::kResourceExhausted || !cache_.evict_one(true))
      return r;
  }
}

void Engine::store_corrupt(const kv::ObjectHeader& h, const Status& why) {
  log_warn("kv store: " + std::string(opt_.store->tier_name()) + " object (block " +
           std::to_string(h.index) + ", " +
           (h.kind == kv::ObjectKind::kWindow ? "window" : "entries") +
           ") failed its checks; recomputing: " + why.message());
  opt_.store->erase(kv::store_key(h.model, h.key, h.kind));
  count_store_corrupt();
}

void Engine::count_store_corrupt() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.store_corrupt;
}

void Engine::load_from_store(Sequence& s, int64_t max_blocks) {
  const int64_t B = opt_.prefix_block;
  // What was read while the request queued (nothing for one admitted again, or a sibling).
  StorePrefetcher::Prefetched pre;
  if (prefetch_) pre = prefetch_->take(s.id);
  auto prefetched = [&](int64_t b) {
    return b >= pre.first_block && b < pre.first_block + int64_t(pre.bytes.size());
  };
  max_blocks = std::min<int64_t>(max_blocks, int64_t(s.block_hashes.size()));
  const int64_t l1 = cache_.chain_length(s.block_hashes, max_blocks);
  if (l1 >= max_blocks) return;
  const bool side = !opt_.swa_bounded_replay;
  auto key = [&](int64_t b, kv::ObjectKind kind) {
    return kv::store_key(fingerprint_, s.block_hashes[size_t(b - 1)], kind);
  };
  // The blocks after L1's chain, read kStoreBatch at a time (one get_many: a pipelined round
  // trip per Redis node, not one per block) and checked as they come, up to the first one the
  // store does not hold or that fails its checks. Held here, not cached, until the deepest
  // boundary with a window side object is known.
  constexpr int64_t kStoreBatch = 16;
  std::vector<std::unique_ptr<CachedBlock>> got;  // blocks l1 + 1, l1 + 2, ...
  std::vector<bool> got_prefetched;               // got[i]'s bytes were prefetched
  for (bool more = true; more && l1 + int64_t(got.size()) < max_blocks;) {
    const int64_t first = l1 + int64_t(got.size()) + 1;
    const int64_t last = std::min(max_blocks, first + kStoreBatch - 1);
    std::vector<kv::StoreKey> keys;
    for (int64_t b = first; b <= last; ++b)
      if (!prefetched(b)) keys.push_back(key(b, kv::ObjectKind::kBlock));
    std::vector<Result<std::string>> read;
    if (!keys.empty()) read = opt_.store->get_many(keys, s.req.retention);
    std::vector<Result<std::string>> bytes;
    for (int64_t b = first, i = 0; b <= last; ++b)
      bytes.push_back(prefetched(b)
                          ? Result<std::string>(std::move(pre.bytes[size_t(b - pre.first_block)]))
                          : std::move(read[size_t(i++)]));
    for (int64_t b = first; b <= last && more; ++b) {
      Result<std::string>& r = bytes[size_t(b - first)];
      more = r.is_ok();
      if (!more) {
        s.store_unread_from = b;
        // A tier found its copy damaged (and removed it): counted as the decode's are.
        if (r.status().code() == StatusCode::kCorrupt) count_store_corrupt();
        break;
      }
      const kv::ObjectHeader h = store_header(s, b, kv::ObjectKind::kBlock);
      auto block =
          decode_block(*r, h, std::span(s.req.prompt).subspan(size_t((b - 1) * B), size_t(B)));
      more = block.is_ok();
      if (!more) {
        s.store_unread_from = b;
        if (block.status().code() == StatusCode::kCorrupt) store_corrupt(h, block.status());
        break;
      }
      got.push_back(std::move(*block));
      got_prefetched.push_back(prefetched(b));
      r = not_found("decoded");  // frees the bytes
    }
  }
  const int64_t n = l1 + int64_t(got.size());
  s.store_read_first = l1 + 1;
  s.store_read_last = n;
  // The deepest block a resume can start from: its window side object prefetched or held. The
  // prefetcher's answers are not asked again (the window it read, the blocks it found without
  // one); the rest is asked deepest first.
  int64_t end = n;
  if (side) {
    std::vector<kv::StoreKey> ask;
    std::vector<int64_t> asked_block;
    int64_t known = l1;
    for (int64_t b = n; b > l1; --b) {
      if (b == pre.window_block) {
        known = b;
        break;
      }
      if (b >= pre.no_window_from && b <= pre.no_window_to) continue;
      ask.push_back(key(b, kv::ObjectKind::kWindow));
      asked_block.push_back(b);
    }
    const size_t held = kv::first_held(*opt_.store, ask);
    end = held < ask.size() ? asked_block[held] : known;
  }
  const bool window_prefetched = side && end > l1 && end == pre.window_block;
  bool prefetched_window_used = false;
  if (side && end > l1) {
    const kv::ObjectHeader w = store_header(s, end, kv::ObjectKind::kWindow);
    Result<std::string> wbytes =
        window_prefetched ? Result<std::string>(std::move(pre.window))
                          : opt_.store->get(key(end, kv::ObjectKind::kWindow), s.req.retention);
    if (wbytes.is_ok()) {
      CachedBlock& block = *got[size_t(end - l1 - 1)];
      Status st = runner_.decode_window(*wbytes, w, pool_.get(), block);
      while (st.code() == StatusCode::kResourceExhausted && cache_.evict_one(true))
        st = runner_.decode_window(*wbytes, w, pool_.get(), block);
      if (st.code() == StatusCode::kCorrupt) store_corrupt(w, st);
      prefetched_window_used = window_prefetched && st.is_ok();
    } else if (wbytes.status().code() == StatusCode::kCorrupt) {
      count_store_corrupt();  // a tier found it damaged and removed it
    }
  }
  int64_t loaded = 0, loaded_prefetched = 0;
  for (int64_t b = l1 + 1; b <= end; ++b) {
    const kv::ObjectHeader h = store_header(s, b, kv::ObjectKind::kBlock);
    if (b > 1 && !cache_.contains(h.parent)) break;  // evicted to make room
    cache_.insert(h.key, h.parent, b, std::move(got[size_t(b - l1 - 1)]));
    ++loaded;
    if (got_prefetched[size_t(b - l1 - 1)]) ++loaded_prefetched;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.store_hit_blocks += loaded;
  stats_.store_prefetched_blocks += loaded_prefetched;
  if (prefetched_window_used) ++stats_.store_prefetched_windows;
  if (loaded == 0) ++stats_.store_misses;
}

void Engine::fork_siblings(Sequence& s, size_t row, int64_t pages_promised,
                           std::vector<std::shared_ptr<Sequence>>& running,
                           std::vector<Sequence*>& heads,
                           std::vector<std::shared_ptr<Sequence>>& deferred) {
  const size_t D = size_t(runner_.hidden_size());
  std::vector<std::shared_ptr<Sequence>> sibs;
  sibs.swap(s.siblings);
  for (auto& sp : sibs) {
    Sequence& x = *sp;
    if (x.stream->cancelled()) {
      finish(x, FinishCause::kCancelled);
      continue;
    }
    // The fork may not take pages the rest of the step was promised.
    const int64_t need = runner_.pages_to_fork(*s.state);
    while (pool_->available() - pages_promised < need && cache_.evict_one(true)) {
    }
    Result<std::unique_ptr<RunnerSequence>> forked =
        Status(StatusCode::kResourceExhausted, "no pages");
    if (pool_->available() - pages_promised >= need) forked = runner_.fork(*s.state);
    if (!forked.is_ok()) {
      x.resume_hint = int64_t(x.all.size());  // runs on its own (the prefix cache may help)
      deferred.push_back(sp);
      continue;
    }
    x.state = std::move(*forked);
    x.prefilled = s.prefilled;
    x.cached = s.cached;
    x.cache_blocks = s.cache_blocks;
    std::copy_n(&hidden_[row * D], D, &hidden_[heads.size() * D]);
    heads.push_back(&x);
    running.push_back(sp);
  }
}

// ---------------------------------------------------------------------------------------
// The scheduler thread: queues, admission choices and the batch plan. With asynchronous
// scheduling it plans step n+1 while the executor computes step n, from the executor's last
// report and what the plan in flight will do; the executor checks every intent against its
// own bookkeeping, so a stale plan costs at most a share of one step's budget.

void Engine::scheduler_loop() {
  Scheduler& sched = *scheduler_;
  bool in_flight = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !incoming_.empty() || sched.has_work() || in_flight; });
      if (stop_) break;
      for (auto& s : incoming_) sched.enqueue(std::move(s));
      incoming_.clear();
      stats_.waiting = sched.waiting();
    }
    // Cancelled requests still queued go now; running ones the executor drops itself.
    std::vector<std::shared_ptr<Sequence>> gone = sched.take_cancelled();
    if (opt_.async_scheduling && in_flight) {
      // Plan n+1 now, while step n computes, then hand it over as soon as n is done.
      Plan p = sched.plan(&*current_plan_);
      p.cancelled = std::move(gone);
      apply(wait_outcome());
      in_flight = false;
      if (!p.empty()) {
        submit(std::move(p));
        in_flight = true;
      }
      continue;
    }
    if (in_flight) {
      apply(wait_outcome());
      in_flight = false;
    }
    Plan p = sched.plan(nullptr);
    p.cancelled = std::move(gone);
    if (p.empty()) continue;  // nothing to run: wait for requests
    submit(std::move(p));
    in_flight = true;
  }
  if (in_flight) apply(wait_outcome());
  {
    std::lock_guard<std::mutex> lock(hmu_);
    exec_stop_ = true;
  }
  hcv_.notify_all();
  if (executor_.joinable()) executor_.join();
  // The executor is gone: its fields may be touched here.
  for (auto& s : sched.take_waiting()) finish(*s, FinishCause::kCancelled);
  std::vector<std::shared_ptr<Sequence>> late;
  {
    std::lock_guard<std::mutex> lock(mu_);
    late.swap(incoming_);
  }
  for (auto& s : late) finish(*s, FinishCause::kCancelled);
}

void Engine::submit(Plan p) {
  current_plan_ = p;
  {
    std::lock_guard<std::mutex> lock(hmu_);
    plan_ = std::move(p);
  }
  hcv_.notify_all();
}

Outcome Engine::wait_outcome() {
  std::unique_lock<std::mutex> lock(hmu_);
  hcv_.wait(lock, [&] { return outcome_.has_value(); });
  Outcome out = std::move(*outcome_);
  outcome_.reset();
  return out;
}

void Engine::apply(Outcome out) {
  scheduler_->apply(out);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.waiting = scheduler_->waiting() + int64_t(incoming_.size());
}

// ---------------------------------------------------------------------------------------
// The executor thread: owns every sequence's state, the page pool's allocations and the
// prefix cache; runs one plan per step.

void Engine::executor_loop() {
  std::vector<std::shared_ptr<Sequence>> running;
  for (;;) {
    Plan p;
    {
      std::unique_lock<std::mutex> lock(hmu_);
      if (!kv_pending_.empty() && !exec_stop_ && !plan_) {
        // Idle: the events a busy log refused at the step's end go out now (waiting for a
        // reader's copy costs no step here).
        lock.unlock();
        kv_events_->publish(kv_pending_);
        kv_pending_.clear();
        lock.lock();
      }
      hcv_.wait(lock, [&] { return exec_stop_ || plan_.has_value(); });
      if (!plan_) break;
      p = std::move(*plan_);
      plan_.reset();
    }
    Outcome out = execute(p, running);
    {
      std::lock_guard<std::mutex> lock(hmu_);
      outcome_ = std::move(out);
    }
    hcv_.notify_all();
  }
  for (auto& s : running) finish(*s, FinishCause::kCancelled);
  for (auto& s : orphans_) finish(*s, FinishCause::kCancelled);
  orphans_.clear();
}

Outcome Engine::execute(Plan& plan, std::vector<std::shared_ptr<Sequence>>& running) {
  const Clock::time_point t_begin = Clock::now();
  Outcome out;
  for (auto& s : plan.cancelled) {
    end_hold(*s);
    finish(*s, FinishCause::kCancelled);
  }
  // Drop cancelled requests.
  for (auto& s : running)
    if (s->stream->cancelled() && !s->done) {
      finish(*s, FinishCause::kCancelled);
    }
  running.erase(std::remove_if(running.begin(), running.end(), [](auto& s) { return s->done; }),
                running.end());

  // Admission by KV pages: a request is admitted when its prompt's pages (less what a
  // prefix hit shares) fit what the pool has free beside the pages held for other P/D
  // hand-offs (kv_reservations.h), evicting cached blocks for room; the first always is; the
  // hold for the request itself, if any, ends as it is admitted. Growth in decode is met by
  // eviction, then by preemption below.
  const int64_t watermark = pool_->max_pages() / 100;
  for (size_t i = 0; i < plan.admit.size(); ++i) {
    Sequence& s = *plan.admit[i];
    if (s.stream->cancelled()) {
      end_hold(s);
      finish(s, FinishCause::kCancelled);
      continue;
    }
    bool fits = int64_t(running.size()) < opt_.max_running;
    if (fits) {
      admit(s);
      const int64_t need = runner_.pages_needed(*s.state, int64_t(s.all.size()) - s.prefilled) +
                           watermark + held_for_others(s);
      while (pool_->available() < need && cache_.evict_one(true)) {
      }
      fits = running.empty() || pool_->available() >= need;
    }
    if (!fits) {
      for (size_t j = i; j < plan.admit.size(); ++j) {
        plan.admit[j]->state.reset();
        plan.admit[j]->prefilled = 0;
        plan.admit[j]->resume_hint = int64_t(plan.admit[j]->all.size());
        out.deferred.push_back(plan.admit[j]);
      }
      break;
    }
    end_hold(s);
    running.push_back(plan.admit[i]);
  }

  // The batch: the plan's intents, each checked against this thread's bookkeeping (a plan
  // made ahead may name a sequence that has finished, or ask for more than is left), prefill
  // chunks cut at prefix-cache block boundaries so their blocks can be kept.
  int64_t step_tokens = 0, batch = 0;
  struct Work {
    Sequence* s;
    int64_t n;              // tokens run (a speculative step: its next token and its drafts)
    int64_t drafts = 0;     // at most this many drafts verified (speculative decoding)
    bool jump = false;      // the drafts are the grammar's jump-forward tokens (s->jump)
    bool decoding = false;  // its step samples a token after the prompt
  };
  std::vector<Work> work;
  for (const auto& [sp, want] : plan.work) {
    Sequence* s = sp.get();
    if (s->done || !s->state) continue;
    if (std::find_if(work.begin(), work.end(), [&](const Work& w) { return w.s == s; }) !=
        work.end())
      continue;
    const int64_t n =
        scheduler_->chunk_size(*s, s->prefilled, int64_t(s->all.size()) - s->prefilled, want);
    if (n < 1) continue;
    int64_t drafts = 0;
    const bool decoding = n == 1 && s->prefilled + 1 == int64_t(s->all.size());
    s->jump.clear();
    if (decoding && opt_.grammar_jump_forward) drafts = jump_forward(*s);
    if (drafts == 0 && opt_.speculative_tokens > 0 && decoding)
      drafts = rows_after_next(*s, opt_.speculative_tokens);  // drafts after its next token
    work.push_back({s, n + drafts, drafts, !s->jump.empty(), decoding});
  }
  // Pages for the step: evict cached blocks, then preempt the newest sequences (dropped and
  // recomputed later) until the step fits the pool.
  int64_t preempted = 0;
  std::vector<int64_t> needs;  // pages each work item may take
  int64_t promised = 0;        // of them, what the items not yet run still need
  for (;;) {
    needs.clear();
    promised = 0;
    for (const Work& w : work) {
      needs.push_back(runner_.pages_needed(*w.s->state, w.n));
      promised += needs.back();
    }
    if (promised <= pool_->available()) break;
    if (cache_.evict_one(true)) continue;
    if (running.size() <= 1) {
      // One sequence that does not fit the whole pool: it fails rather than waits forever.
      for (const Work& w : work) {
        finish(*w.s, FinishCause::kError,
               Status(StatusCode::kResourceExhausted, "the request needs more KV than the budget"));
      }
      work.clear();
      break;
    }
    std::shared_ptr<Sequence> victim = running.back();
    victim->state.reset();
    victim->jump.clear();
    victim->prefilled = 0;
    victim->resume_hint = int64_t(victim->all.size());
    work.erase(std::remove_if(work.begin(), work.end(),
                              [&](const Work& w) { return w.s == victim.get(); }),
               work.end());
    out.preempted.push_back(victim);
    running.pop_back();
    ++preempted;
  }
  const Clock::time_point t_plan = Clock::now();
  int64_t replayed = 0;
  // Bodies: the decoding sequences and short prefill chunks in one pass (forward_each gives
  // each exactly what it gets alone), then long prefill chunks one at a time over the whole
  // pool; the head once for every sequence that needs logits.
  const int64_t D = runner_.hidden_size();
  size_t head_rows = work.size();  // every item completes at most one row, plus its siblings
  for (const Work& w : work) head_rows += w.s->siblings.size();
  if (hidden_.size() < head_rows * size_t(D)) hidden_.resize(head_rows * size_t(D));
  float* hidden = hidden_.data();
  // Speculative steps: draft, then choose how many drafts each sequence verifies (none: a
  // plain decode, batched with the other decodes). The scheduler sees the whole step: the
  // tokens it emits and the rows its pass runs without drafts.
  constexpr int64_t kBatchedChunkRows = 128;
  struct Drafted {
    std::vector<int32_t> drafts;
    std::vector<float> confidence;
  };
  std::vector<Drafted> drafted(work.size());
  std::vector<size_t> drafting;  // work items whose drafts the scheduler chooses
  int64_t base_tokens = 0, base_rows = 0, most = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    const Work& w = work[i];
    if (w.n - w.drafts <= kBatchedChunkRows) base_rows += w.jump ? w.n : w.n - w.drafts;
    if (w.decoding) base_tokens += w.jump ? 1 + w.drafts : 1;
    if (w.drafts == 0) continue;
    if (w.jump) {
      drafted[i].drafts = w.s->jump;
      continue;
    }
    drafting.push_back(i);
    most = std::max(most, w.drafts);
  }
  const bool draft_now =
      !drafting.empty() &&
      draft_sched_->should_draft(base_tokens, base_rows, most, int64_t(drafting.size()));
  // Every drafting sequence's stages in one pass (draft_each: each gets what it gets alone).
  std::vector<Status> draft_status(drafting.size());
  if (draft_now) {
    std::vector<RunnerSequence*> states;
    std::vector<int32_t> main_tokens;
    std::vector<std::vector<int32_t>> ids(drafting.size());
    std::vector<std::vector<float>> conf(drafting.size());
    for (size_t i : drafting) {
      states.push_back(work[i].s->state.get());
      main_tokens.push_back(work[i].s->all.back());
    }
    draft_status = runner_.draft_each(states, main_tokens, ids, conf);
    for (size_t d = 0; d < drafting.size(); ++d) {
      drafted[drafting[d]].drafts = std::move(ids[d]);
      drafted[drafting[d]].confidence = std::move(conf[d]);
    }
  }
  std::vector<DraftScheduler::Candidate> candidates;
  std::vector<size_t> candidate_items;
  for (size_t d = 0; d < drafting.size(); ++d) {
    const size_t i = drafting[d];
    Work& w = work[i];
    Sequence& s = *w.s;
    if (draft_now) {
      if (!draft_status[d].is_ok()) {
        finish(s, FinishCause::kError, draft_status[d]);
        continue;
      }
      candidates.push_back(
          {drafted[i].confidence, std::min(w.drafts, int64_t(drafted[i].drafts.size()))});
      candidate_items.push_back(i);
    }
    w.drafts = 0;  // until chosen
    w.n = 1;
  }
  int64_t draft_tokens = 0;
  std::array<int64_t, 9> chosen_hist{};
  if (!candidates.empty()) {
    const std::vector<int64_t> k = draft_sched_->choose(candidates, base_tokens, base_rows);
    for (size_t c = 0; c < candidate_items.size(); ++c) {
      draft_tokens += candidates[c].most;
      ++chosen_hist[size_t(std::clamp<int64_t>(k[c], 0, 8))];
      Work& w = work[candidate_items[c]];
      drafted[candidate_items[c]].drafts.resize(size_t(k[c]));
      w.drafts = k[c];
      w.n = 1 + k[c];
    }
  }
  for (size_t i : drafting)
    if (work[i].drafts == 0) drafted[i].drafts.clear();
  // Structured-output masks for the rows this step samples, computed by the mask worker while
  // the forward runs (a verify step's rows after its drafts; the drafts' buffers move into
  // `verified` below, which keeps them where the jobs' spans point).
  std::vector<GrammarMaskWorker::Job>& mask_jobs = masks_.jobs();
  mask_jobs.clear();
  for (size_t i = 0; opt_.grammar_masks_ahead && i < work.size(); ++i) {
    const Work& w = work[i];
    Sequence& s = *w.s;
    if (s.done || s.prefilled + w.n - w.drafts != int64_t(s.all.size())) continue;
    const int64_t g = int64_t(s.generated.size());
    if (!OutputProcessor::samples(s.req, g, s.think_ended)) continue;
    grammar::GrammarMatcher* m =
        OutputProcessor::matcher_for(s.req, s.generated, s.think_ended, &s.matcher);
    if (!m) continue;
    size_t d = 0;
    while (d < drafted[i].drafts.size() &&
           OutputProcessor::samples(s.req, g + int64_t(d) + 1, s.think_ended))
      ++d;
    const size_t forced = w.jump ? d : 0;  // jump-forward rows: emitted, not sampled
    s.mask_base = g + int64_t(forced);
    s.mask_rows = 0;
    mask_jobs.push_back({m, std::span(drafted[i].drafts).first(d), forced, &s.masks, &s.mask_rows});
  }
  masks_.start();
  // Verify rows, decodes and short prefill chunks run in one pass over the weights
  // (forward_each gives each exactly what it gets alone); a long chunk runs alone with the
  // pool inside it. The verifying sequences come first, in work order, so that their rows'
  // head inputs are one block for one head call.
  std::vector<size_t> decodes;  // work items in the pass: the verifying ones first
  size_t verifies = 0, verify_rows = 0;
  for (size_t i = 0; i < work.size(); ++i)
    if (!work[i].s->done && work[i].drafts > 0) {
      decodes.push_back(i);
      ++verifies;
      verify_rows += size_t(work[i].n);
    }
  for (size_t i = 0; i < work.size(); ++i)
    if (!work[i].s->done && work[i].drafts == 0 && work[i].n <= kBatchedChunkRows)
      decodes.push_back(i);
  // The speculative steps' verify rows' logits.
  struct Verified {
    Sequence* s;
    std::vector<int32_t> drafts;
    std::vector<float> confidence;
    size_t logits_at;
    bool jump;
  };
  std::vector<Verified> verified;
  size_t spec_rows = 0;
  for (const Work& w : work)
    if (w.drafts > 0) spec_rows += size_t(w.n);
  // (Only a sequence verifying outside the pass, alone, writes its logits here.)
  if (decodes.size() < 2 && spec_logits_.size() < spec_rows * size_t(vocab_))
    spec_logits_.resize(spec_rows * size_t(vocab_));
  size_t spec_at = 0;
  std::vector<Status> decoded;  // by position in `decodes`, when the pass ran
  std::vector<float> decoded_hidden;
  // A verifying sequence's rows: its next token and its drafts.
  std::vector<std::vector<int32_t>> verify_tokens(work.size());
  for (size_t k = 0; k < verifies; ++k) {
    const size_t i = decodes[k];
    verify_tokens[i] = {work[i].s->all.back()};
    verify_tokens[i].insert(verify_tokens[i].end(), drafted[i].drafts.begin(),
                            drafted[i].drafts.end());
  }
  if (decodes.size() >= 2) {
    std::vector<RunnerSequence*> states;
    std::vector<std::span<const int32_t>> chunks;
    const std::unique_ptr<bool[]> verify(new bool[decodes.size()]);
    for (size_t k = 0; k < decodes.size(); ++k) {
      const size_t i = decodes[k];
      Sequence& s = *work[i].s;
      states.push_back(s.state.get());
      verify[k] = k < verifies;
      chunks.push_back(k < verifies
                           ? std::span<const int32_t>(verify_tokens[i])
                           : std::span(s.all).subspan(size_t(s.prefilled), size_t(work[i].n)));
    }
    decoded_hidden.resize((verify_rows + decodes.size() - verifies) * size_t(D));
    decoded = runner_.forward_each(states, chunks, decoded_hidden.data(),
                                   std::span<const bool>(verify.get(), decodes.size()));
  }
  // The verify rows of the pass (in work order, as spec_at counts them below) join the head
  // call of the step's other rows: one read of the head's weights for both, each row's
  // logits what they are alone.
  const bool verify_in_head = verify_rows > 0 && !decoded.empty();
  // Where a work item's result is in `decoded` (or none: it runs on its own below).
  std::vector<int64_t> pass_slot(work.size(), -1);
  for (size_t k = 0; k < decoded.size(); ++k) pass_slot[decodes[k]] = int64_t(k);
  std::vector<Sequence*> heads;
  for (size_t wi = 0; wi < work.size(); ++wi) {
    const Work& w = work[wi];
    Sequence& s = *w.s;
    promised -= needs[wi];
    if (s.done) continue;  // its draft failed
    if (w.drafts > 0) {
      // The next token and the drafts in one call.
      Verified v{&s, std::move(drafted[wi].drafts), std::move(drafted[wi].confidence), spec_at,
                 w.jump};
      const std::vector<int32_t>& rows = verify_tokens[wi];
      const Status st =
          pass_slot[wi] >= 0
              ? decoded[size_t(pass_slot[wi])]
              : runner_.verify(*s.state, rows, &spec_logits_[spec_at * size_t(vocab_)]);
      spec_at += rows.size();
      step_tokens += int64_t(v.drafts.size()) + 1;
      ++batch;
      if (!st.is_ok()) {
        finish(s, FinishCause::kError, st);
        drafted[wi].drafts = std::move(v.drafts);  // a mask job may still read them
        continue;
      }
      verified.push_back(std::move(v));
      continue;
    }
    const bool completes = s.prefilled + w.n == int64_t(s.all.size());
    Status st;
    if (pass_slot[wi] >= 0) {
      st = decoded[size_t(pass_slot[wi])];
      const size_t row = verify_rows + size_t(pass_slot[wi]) - verifies;
      std::copy_n(&decoded_hidden[row * size_t(D)], D, &hidden[heads.size() * size_t(D)]);
    } else {
      st = runner_.forward(*s.state, std::span(s.all).subspan(size_t(s.prefilled), size_t(w.n)),
                           completes ? &hidden[heads.size() * size_t(D)] : nullptr);
    }
    if (st.is_ok() && completes) heads.push_back(&s);
    step_tokens += w.n;
    ++batch;
    if (!st.is_ok()) {
      finish(s, FinishCause::kError, st);
      continue;
    }
    if (s.prefilled < s.cached) replayed += std::min(w.n, s.cached - s.prefilled);
    s.prefilled += w.n;
    const int64_t B = opt_.prefix_block;
    if (cache_on_ && s.prefilled % B == 0 && s.prefilled <= int64_t(s.req.prompt.size()) &&
        s.prefilled / B <= int64_t(s.block_hashes.size()))
      cache_insert(s, promised);
    if (completes && !s.siblings.empty())
      fork_siblings(s, heads.size() - 1, promised, running, heads, out.deferred);
  }
  const Clock::time_point t_body = Clock::now();
  // The head's rows (the sampling rows, then the pass's verify rows): the buffers grow to the
  // largest step and are then reused as they are.
  const size_t head_calls = heads.size() + (verify_in_head ? verify_rows : 0);
  if (verify_in_head) {
    if (hidden_.size() < head_calls * size_t(D)) hidden_.resize(head_calls * size_t(D));
    hidden = hidden_.data();
    std::copy_n(decoded_hidden.data(), verify_rows * size_t(D), &hidden[heads.size() * size_t(D)]);
  }
  if (logits_.size() < head_calls * size_t(vocab_)) logits_.resize(head_calls * size_t(vocab_));
  if (head_calls > 0) runner_.head_logits(hidden, int64_t(head_calls), logits_.data());
  const double mask_wait_s = masks_.wait();
  const Clock::time_point t_head = Clock::now();
  double sample_s = 0;
  // Sample, stream, stop.
  stats_generated_in_step_ = 0;
  stats_masks_in_step_ = stats_masks_ahead_in_step_ = 0;
  for (size_t i = 0; i < heads.size(); ++i) {
    Sequence& s = *heads[i];
    if (s.stream->cancelled()) continue;
    const Clock::time_point ts = Clock::now();
    int32_t tok = 0;
    const FinishCause cause = append_token(s, &logits_[i * size_t(vocab_)], &tok);
    sample_s += std::chrono::duration<double>(Clock::now() - ts).count();
    if (s.done) continue;  // an injected error
    if (cause != FinishCause::kNone)
      finish(s, cause);  // one event: the token and the end
    else
      flush(s);
  }
  int64_t spec_verified = 0, spec_accepted = 0, jump_steps = 0, jump_tokens = 0;
  std::array<int64_t, 9> spec_hist{};
  for (Verified& v : verified) {
    Sequence& s = *v.s;
    if (s.stream->cancelled()) continue;
    const Clock::time_point ts = Clock::now();
    float* rows = verify_in_head ? &logits_[(heads.size() + v.logits_at) * size_t(vocab_)]
                                 : &spec_logits_[v.logits_at * size_t(vocab_)];
    const int64_t accepted = accept_drafts(s, rows, v.drafts);
    sample_s += std::chrono::duration<double>(Clock::now() - ts).count();
    if (accepted < 0) continue;
    if (v.jump) {  // forced, so all emitted (unless the request ended inside them)
      ++jump_steps;
      jump_tokens += std::min(accepted + 1, int64_t(v.drafts.size()));
      continue;
    }
    draft_sched_->observe(v.confidence, int64_t(v.drafts.size()), accepted);
    spec_verified += int64_t(v.drafts.size());
    spec_accepted += accepted;
    ++spec_hist[size_t(accepted)];
  }
  for (const GrammarMaskWorker::Job& j : mask_jobs) *j.rows = 0;
  for (const Work& w : work) w.s->jump.clear();
  const int64_t generated = stats_generated_in_step_;
  int64_t finished = 0;
  for (auto& s : running)
    if (!s->done && s->stream->cancelled()) {
      finish(*s, FinishCause::kCancelled);
    }
  for (auto& s : running) finished += s->done;
  running.erase(std::remove_if(running.begin(), running.end(), [](auto& s) { return s->done; }),
                running.end());
  for (auto& s : running)
    out.running.push_back({s, int64_t(s->all.size()) - s->prefilled, s->prefilled});
  // Samples whose leader was cancelled before the fork go back to the queue.
  for (auto& s : orphans_) {
    s->resume_hint = int64_t(s->all.size());
    out.deferred.push_back(std::move(s));
  }
  orphans_.clear();
  // The step's cache changes in one go, unless a reader holds the log (then next step).
  if (!kv_pending_.empty() && kv_events_->try_publish(kv_pending_)) kv_pending_.clear();
  const kv::PoolStats ps = pool_->stats();
  out.free_pages = pool_->available() + cache_.bytes() / pool_->page_bytes();
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const Clock::time_point t_end = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.plan_seconds += secs(t_begin, t_plan);
  stats_.body_seconds += secs(t_plan, t_body);
  stats_.head_seconds += secs(t_body, t_head) - mask_wait_s;
  stats_.mask_wait_seconds += mask_wait_s;
  stats_.grammar_masks += stats_masks_in_step_;
  stats_.grammar_masks_ahead += stats_masks_ahead_in_step_;
  stats_.sample_seconds += sample_s;
  stats_.post_seconds += secs(t_head, t_end) - sample_s;
  stats_.running = int64_t(running.size());
  ++stats_.steps;
  stats_.step_tokens_last = step_tokens;
  stats_.batch_size_last = batch;
  stats_.kv_bytes = ps.pages_in_use * ps.page_bytes;
  stats_.kv_pages_used = ps.pages_in_use;
  stats_.kv_pages_peak = std::max(stats_.kv_pages_peak, ps.pages_in_use);
  last_progress_ = t_end;
  stats_.replayed_tokens += replayed;
  stats_.prefix_cache_bytes = cache_.bytes();
  stats_.prefix_blocks = cache_.blocks();
  stats_.requests_finished += finished;
  stats_.generated_tokens += generated;
  stats_.preemptions += preempted;
  stats_.spec_steps +=
      std::count_if(verified.begin(), verified.end(), [](const Verified& v) { return !v.jump; });
  stats_.grammar_jump_steps += jump_steps;
  stats_.grammar_jump_tokens += jump_tokens;
  stats_.spec_verified_tokens += spec_verified;
  stats_.spec_accepted_tokens += spec_accepted;
  for (size_t i = 0; i < spec_hist.size(); ++i) stats_.spec_accepted_hist[i] += spec_hist[i];
  stats_.spec_draft_tokens += draft_tokens;
  for (size_t i = 0; i < chosen_hist.size(); ++i) stats_.spec_chosen_hist[i] += chosen_hist[i];
  return out;
}

}  // namespace fathom::engine
