#include "engine/engine.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "model/v41.h"

namespace fathom::engine {

using Clock = std::chrono::steady_clock;

bool RequestStream::next(StreamEvent* ev, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); }))
    return false;
  *ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::push(StreamEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

struct Engine::Sequence {
  uint64_t id = 0;
  GenerationRequest req;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<model::SequenceState> state;
  std::vector<int32_t> all;  // prompt + generated
  std::vector<int32_t> generated;
  std::vector<uint64_t> block_hashes;  // chained hash after each full prompt block
  int64_t prefilled = 0;               // tokens of `all` in the state
  int64_t cached = 0;                  // prompt tokens served by the prefix cache
  bool first_sent = false;
  Clock::time_point submitted;
};

struct Engine::CacheEntry {
  uint64_t hash = 0;
  int64_t tokens = 0, bytes = 0, last_used = 0;
  std::unique_ptr<model::SequenceState> state;
};

Engine::Engine(const model::V41Model& model, EngineOptions options, int32_t eos_id)
    : model_(model), opt_(options), eos_(eos_id), vocab_(model.config().vocab_size) {
  stats_.kv_budget_bytes = opt_.kv_budget_bytes;
  // Sequence state: fp32 compressed KV and index keys per kv source (one entry per `ratio`
  // tokens) and the token itself, plus one window ring per layer and DSpark stage.
  const model::ModelConfig& c = model.config();
  kv_per_token_ = 4;
  for (int64_t l : c.kv_source_layers)
    kv_per_token_ +=
        4.0 * double(c.head_dim + c.index_head_dim) / double(c.compress_ratios[size_t(l)]);
  kv_fixed_ = (c.n_layers + c.n_mtp_layers) * c.window_size * c.head_dim * 4;
  thread_ = std::thread([this] { loop(); });
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

Result<std::shared_ptr<RequestStream>> Engine::submit(GenerationRequest request) {
  if (request.prompt.empty()) return invalid_argument("the prompt has no tokens");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= vocab_)
      return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary");
  if (request.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  for (int32_t t : request.forced_output)
    if (t < 0 || t >= vocab_) return invalid_argument("forced output id outside the vocabulary");
  auto s = std::make_unique<Sequence>();
  s->stream = std::make_shared<RequestStream>();
  s->submitted = Clock::now();
  s->all = request.prompt;
  s->req = std::move(request);
  auto stream = s->stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kResourceExhausted, "the engine is shutting down");
    s->id = next_id_++;
    if (!s->req.seeded) s->req.sampling.seed = std::random_device{}() ^ (uint64_t(s->id) << 32);
    incoming_.push_back(std::move(s));
    ++stats_.waiting;
  }
  cv_.notify_all();
  return stream;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  return s;
}

void Engine::finish(Sequence& s, FinishCause cause, Status error) {
  StreamEvent ev;
  ev.finished = true;
  ev.cause = cause;
  ev.error = std::move(error);
  ev.prompt_tokens = int64_t(s.req.prompt.size());
  ev.cached_tokens = s.cached;
  ev.completion_tokens = int64_t(s.generated.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.prompt_tokens += ev.prompt_tokens;
    stats_.cached_tokens += ev.cached_tokens;
  }
  s.stream->push(std::move(ev));
  s.state.reset();
}

// Finds the longest cached prefix (leaving at least one prompt token to run).
void Engine::admit(Sequence& s) {
  s.state = model_.new_sequence();
  s.prefilled = 0;
  const int64_t B = opt_.prefix_block;
  if (!opt_.prefix_cache || B <= 0) return;
  if (s.block_hashes.empty()) {
    uint64_t h = s.req.cache_salt;
    for (int64_t b = 0; (b + 1) * B <= int64_t(s.req.prompt.size()); ++b) {
      h = XXH3_64bits_withSeed(&s.req.prompt[size_t(b * B)], size_t(B) * sizeof(int32_t), h);
      s.block_hashes.push_back(h);
    }
  }
  for (int64_t b = int64_t(s.block_hashes.size()); b >= 1; --b) {
    if (b * B >= int64_t(s.all.size())) continue;
    for (auto& e : cache_) {
      if (e->hash != s.block_hashes[size_t(b - 1)] || e->tokens != b * B) continue;
      s.state = model::clone_sequence(*e->state);
      s.prefilled = b * B;
      if (s.cached == 0) s.cached = b * B;
      e->last_used = ++cache_clock_;
      return;
    }
  }
}

void Engine::cache_insert(uint64_t hash, const Sequence& s) {
  for (auto& e : cache_)
    if (e->hash == hash && e->tokens == s.prefilled) {
      e->last_used = ++cache_clock_;
      return;
    }
  auto e = std::make_unique<CacheEntry>();
  e->hash = hash;
  e->tokens = s.prefilled;
  e->state = model::clone_sequence(*s.state);
  e->bytes = model::sequence_bytes(*e->state);
  e->last_used = ++cache_clock_;
  cache_bytes_ += e->bytes;
  cache_.push_back(std::move(e));
  while (cache_bytes_ > opt_.prefix_cache_bytes && !cache_.empty()) {
    auto lru = std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) {
      return a->last_used < b->last_used;
    });
    cache_bytes_ -= (*lru)->bytes;
    cache_.erase(lru);
  }
}

void Engine::loop() {
  std::vector<std::unique_ptr<Sequence>> running;
  std::deque<std::unique_ptr<Sequence>> waiting;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [&] { return stop_ || !incoming_.empty() || !running.empty() || !waiting.empty(); });
      if (stop_) break;
      for (auto& s : incoming_) waiting.push_back(std::move(s));
      incoming_.clear();
    }
    step(running, waiting);
  }
  for (auto& s : running) finish(*s, FinishCause::kCancelled);
  for (auto& s : waiting) finish(*s, FinishCause::kCancelled);
  std::vector<std::unique_ptr<Sequence>> late;
  {
    std::lock_guard<std::mutex> lock(mu_);
    late.swap(incoming_);
  }
  for (auto& s : late) finish(*s, FinishCause::kCancelled);
}

void Engine::step(std::vector<std::unique_ptr<Sequence>>& running,
                  std::deque<std::unique_ptr<Sequence>>& waiting) {
  // Drop cancelled requests.
  auto cancelled = [&](std::unique_ptr<Sequence>& s) {
    if (!s->stream->cancelled()) return false;
    finish(*s, FinishCause::kCancelled);
    return true;
  };
  running.erase(std::remove_if(running.begin(), running.end(), cancelled), running.end());
  waiting.erase(std::remove_if(waiting.begin(), waiting.end(), cancelled), waiting.end());

  // Admission by the KV budget: a request is admitted when the state of everything
  // running plus its own estimated final size fits.
  auto estimate = [&](const Sequence& s) {
    return kv_fixed_ + int64_t(kv_per_token_ * double(int64_t(s.all.size()) + s.req.max_tokens));
  };
  int64_t kv = 0;
  for (auto& s : running) kv += model::sequence_bytes(*s->state);
  while (!waiting.empty() && int64_t(running.size()) < opt_.max_running) {
    Sequence& s = *waiting.front();
    const int64_t need = estimate(s);
    if (!running.empty() && kv + need > opt_.kv_budget_bytes) break;
    admit(s);
    kv += model::sequence_bytes(*s.state);
    running.push_back(std::move(waiting.front()));
    waiting.pop_front();
  }
  // Preemption when the running states outgrow the budget: the newest goes back to the
  // queue and will be recomputed from its tokens.
  int64_t preempted = 0;
  while (running.size() > 1 && kv > opt_.kv_budget_bytes) {
    Sequence& s = *running.back();
    kv -= model::sequence_bytes(*s.state);
    s.state.reset();
    s.prefilled = 0;
    waiting.push_front(std::move(running.back()));
    running.pop_back();
    ++preempted;
  }

  // The batch: one token for every decoding sequence, then prefill chunks under the budget
  // (cut at prefix-cache block boundaries so their states can be kept).
  int64_t budget = opt_.max_step_tokens, step_tokens = 0, batch = 0;
  struct Work {
    Sequence* s;
    int64_t n;
  };
  std::vector<Work> work;
  for (auto& s : running)
    if (s->prefilled == int64_t(s->all.size()) - 1) {
      work.push_back({s.get(), 1});
      --budget;
    }
  for (auto& s : running) {
    const int64_t left = int64_t(s->all.size()) - s->prefilled;
    if (left <= 1 || budget <= 0) continue;
    int64_t n = std::min(left, budget);
    if (opt_.prefix_cache && opt_.prefix_block > 0) {
      const int64_t next_block = (s->prefilled / opt_.prefix_block + 1) * opt_.prefix_block;
      if (next_block <= int64_t(s->req.prompt.size())) n = std::min(n, next_block - s->prefilled);
    }
    work.push_back({s.get(), n});
    budget -= n;
  }
  std::vector<float> scratch;
  // Bodies one sequence at a time; the head once for every sequence that needs logits.
  const int64_t D = model_.config().dim;
  std::vector<float> hidden(work.size() * size_t(D));
  std::vector<Sequence*> heads;
  for (const Work& w : work) {
    Sequence& s = *w.s;
    const bool completes = s.prefilled + w.n == int64_t(s.all.size());
    Status st = model_.forward(*s.state, std::span(s.all).subspan(size_t(s.prefilled), size_t(w.n)),
                               nullptr, nullptr, false,
                               completes ? &hidden[heads.size() * size_t(D)] : nullptr);
    if (st.is_ok() && completes) heads.push_back(&s);
    step_tokens += w.n;
    ++batch;
    if (!st.is_ok()) {
      s.stream->cancel();
      finish(s, FinishCause::kError, st);
      continue;
    }
    s.prefilled += w.n;
    const int64_t B = opt_.prefix_block;
    if (opt_.prefix_cache && B > 0 && s.prefilled % B == 0 &&
        s.prefilled <= int64_t(s.req.prompt.size()) &&
        s.prefilled / B <= int64_t(s.block_hashes.size()))
      cache_insert(s.block_hashes[size_t(s.prefilled / B - 1)], s);
  }
  std::vector<float> logits(heads.size() * size_t(vocab_));
  if (!heads.empty()) model_.head_logits(hidden.data(), int64_t(heads.size()), logits.data());
  // Sample, stream, stop.
  int64_t generated = 0;
  for (size_t i = 0; i < heads.size(); ++i) {
    Sequence& s = *heads[i];
    if (s.stream->cancelled()) continue;
    const int32_t tok =
        s.generated.size() < s.req.forced_output.size()
            ? s.req.forced_output[s.generated.size()]
            : sample_token(&logits[i * size_t(vocab_)], vocab_, s.req.sampling, s.req.prompt,
                           s.generated, s.req.seeded ? 0 : s.id, uint64_t(s.all.size()), scratch);
    s.generated.push_back(tok);
    s.all.push_back(tok);
    ++generated;
    StreamEvent ev;
    ev.tokens = {tok};
    ev.prompt_tokens = int64_t(s.req.prompt.size());
    ev.cached_tokens = s.cached;
    ev.completion_tokens = int64_t(s.generated.size());
    if (!s.first_sent) {
      s.first_sent = true;
      ev.first_token_seconds = std::chrono::duration<double>(Clock::now() - s.submitted).count();
    }
    s.stream->push(std::move(ev));
    FinishCause cause = FinishCause::kNone;
    if (tok == eos_ && !s.req.ignore_eos)
      cause = FinishCause::kEos;
    else if (std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), tok) != s.req.stop_ids.end())
      cause = FinishCause::kStopToken;
    else if (int64_t(s.generated.size()) >= s.req.max_tokens)
      cause = FinishCause::kLength;
    if (cause != FinishCause::kNone) {
      finish(s, cause);
      s.stream->cancel();  // marks it for removal below
    }
  }
  int64_t finished = 0;
  for (auto& s : running)
    if (s->stream->cancelled()) {
      if (s->state) finish(*s, FinishCause::kCancelled);
      ++finished;
    }
  running.erase(std::remove_if(running.begin(), running.end(),
                               [](auto& s) { return s->stream->cancelled(); }),
                running.end());
  int64_t kv_now = 0;
  for (auto& s : running) kv_now += model::sequence_bytes(*s->state);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.waiting = int64_t(waiting.size() + incoming_.size());
  stats_.running = int64_t(running.size());
  ++stats_.steps;
  stats_.step_tokens_last = step_tokens;
  stats_.batch_size_last = batch;
  stats_.kv_bytes = kv_now;
  stats_.prefix_cache_bytes = cache_bytes_;
  stats_.prefix_blocks = int64_t(cache_.size());
  stats_.requests_finished += finished;
  stats_.generated_tokens += generated;
  stats_.preemptions += preempted;
}

}  // namespace fathom::engine
