// The engine: requests enter a queue; one engine thread forms a batch every step under a
// token budget — one decode token for every running sequence plus chunked prefill for the
// waiting ones (continuous batching) — admits sequences while the KV budget allows,
// preempts (drops the state and recomputes later) the newest one when it runs out, samples,
// and streams tokens to each request. Prefix caching keys 128-token prompt blocks by a
// chained XXH3 hash (previous block's hash, the block's ids, a tenant/model salt) and keeps
// the sequence state at each cached block boundary, so a hit resumes the prefill there
// exactly; unreferenced blocks are evicted LRU under their own budget.
//
// submit() and the RequestStream methods may be called from any thread; all model work
// happens on the engine thread. Scheduling takes one lock per step, not per token.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"

namespace fathom::model {
class V41Model;
}

namespace fathom::engine {

struct EngineOptions {
  int64_t max_step_tokens = 256;                  // token budget of one step (decode + prefill)
  int64_t max_running = 64;                       // sequences decoding at once
  int64_t kv_budget_bytes = int64_t(4) << 30;     // sequence state of admitted requests
  int64_t prefix_cache_bytes = int64_t(1) << 30;  // snapshots kept by the prefix cache
  int64_t prefix_block = 128;
  bool prefix_cache = true;
};

enum class FinishCause { kNone, kEos, kStopToken, kLength, kCancelled, kError };

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  bool seeded = false;  // sampling.seed was given by the client
  int64_t max_tokens = 256;
  std::vector<int32_t> stop_ids;  // besides the model's EOS
  uint64_t cache_salt = 0;        // tenant/model salt of the prefix-cache hashes
  bool ignore_eos = false;
  // Testing aid (servers expose it only when asked to): the first generated tokens are these
  // instead of samples (teacher forcing; the model still runs on them).
  std::vector<int32_t> forced_output;
};

// What a request sees: batches of new tokens, then one final event.
struct StreamEvent {
  std::vector<int32_t> tokens;
  bool finished = false;
  FinishCause cause = FinishCause::kNone;
  Status error;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double queue_seconds = 0, first_token_seconds = 0;  // set on the first token event
};

// The consumer side of one request. Thread-safe.
class RequestStream {
 public:
  // Waits for the next event (up to `timeout_ms`); false on timeout.
  bool next(StreamEvent* ev, int timeout_ms);
  // Asks the engine to stop this request at its next step (client gone).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class Engine;
  void push(StreamEvent ev);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct EngineStats {
  int64_t waiting = 0, running = 0, steps = 0, step_tokens_last = 0, batch_size_last = 0;
  int64_t kv_bytes = 0, kv_budget_bytes = 0, prefix_cache_bytes = 0, prefix_blocks = 0;
  int64_t requests_finished = 0, prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0,
          preemptions = 0;
};

class Engine {
 public:
  Engine(const model::V41Model& model, EngineOptions options, int32_t eos_id);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; kInvalidArgument for an empty prompt or ids outside the vocabulary.
  Result<std::shared_ptr<RequestStream>> submit(GenerationRequest request);
  EngineStats stats() const;
  // Stops the engine thread; in-flight requests finish with kCancelled.
  void shutdown();

 private:
  struct Sequence;
  struct CacheEntry;
  void loop();
  void step(std::vector<std::unique_ptr<Sequence>>& running,
            std::deque<std::unique_ptr<Sequence>>& waiting);
  void admit(Sequence& s);
  void cache_insert(uint64_t hash, const Sequence& s);
  void finish(Sequence& s, FinishCause cause, Status error = Status::ok());

  const model::V41Model& model_;
  EngineOptions opt_;
  int32_t eos_;
  int64_t vocab_;
  double kv_per_token_ = 0;  // admission estimate of a sequence's state: bytes per token
  int64_t kv_fixed_ = 0;     // and per sequence
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> incoming_;  // guarded by mu_
  bool stop_ = false;                                // guarded by mu_
  EngineStats stats_;                                // guarded by mu_
  uint64_t next_id_ = 1;                             // guarded by mu_
  std::vector<std::unique_ptr<CacheEntry>> cache_;   // engine thread only
  int64_t cache_bytes_ = 0, cache_clock_ = 0;        // engine thread only
  std::thread thread_;
};

}  // namespace fathom::engine
