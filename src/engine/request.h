// What a request asks of the engine (GenerationRequest) and what it gets back (StreamEvent,
// plain data), and the stream the events come through (RequestStream, thread-safe).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar_cache.h"

namespace fathom::engine {

class Engine;

enum class FinishCause { kNone, kEos, kStopToken, kLength, kCancelled, kError };

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  bool seeded = false;  // sampling.seed was given by the client
  int64_t max_tokens = 256;
  std::vector<int32_t> stop_ids;  // besides the model's EOS
  uint64_t cache_salt = 0;        // tenant/model salt of the prefix-cache hashes
  // The KV store's retention class for the blocks this request writes and reads (an index
  // into the store's kv::RetentionPolicy; kDefaultRetention: the policy's default).
  uint8_t retention = 255;
  bool ignore_eos = false;
  // vLLM's logits controls (OpenAI's logit_bias too), applied to each sampled position before
  // the penalties: see OutputProcessor. logit_bias: (id, bias in [-100, 100]) pairs, one per
  // id. allowed_token_ids: only these ids may be sampled (empty: every id). min_tokens: EOS
  // and stop_ids may not be sampled before this many output tokens. bad_words: id sequences;
  // a sequence's last id may not be sampled where the output ends with the rest of it.
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<int32_t> allowed_token_ids;
  int64_t min_tokens = 0;
  std::vector<std::vector<int32_t>> bad_words;
  // The words `bad_words` was tokenized from (the server sets both): what `fathom router`
  // sends an upstream that takes words (vLLM); the engine does not read them. The first
  // `bad_words_from_ids` entries of bad_words came as ids (Fathom's bad_words_ids), the rest
  // from these words.
  std::vector<std::string> bad_words_text;
  size_t bad_words_from_ids = 0;
  // Testing aid (servers expose it only when asked to): the first generated tokens are these
  // instead of samples (teacher forcing; the model still runs on them).
  std::vector<int32_t> forced_output;
  // -1: no logprobs; 0..20: every event carries each token's logprob (see token_logprob() in
  // sampler.h) plus this many most likely alternatives.
  int top_logprobs = -1;
  // With think_end_id >= 0: after this many generated tokens without think_end_id, the next
  // token is think_end_id (forced by id, not sampled). -1 = no budget.
  int64_t reasoning_budget = -1;
  int32_t think_end_id = -1;
  // Testing hook: the request fails with an internal error (a kError final event) after
  // emitting this many tokens (0 = before the first). -1 = off.
  int64_t inject_error_after = -1;
  // Output this request already generated elsewhere (a router moving it off a failed replica):
  // the engine runs these tokens as the decode steps that produced them (as it recomputes a
  // preempted sequence) and continues after them, so the continuation is what the request
  // would have generated there — greedy, seeded (keyed by absolute position), penalties and
  // the reasoning budget alike. They count toward max_tokens and are not sent again.
  std::vector<int32_t> resume_output;
  // Which of n samples of one prompt this is (submit_n sets it): a seeded request draws its
  // random numbers keyed by (seed, sample_index, position).
  int32_t sample_index = 0;
  // Structured output: every sampled token must keep the output inside this grammar (tokens
  // it rejects are masked to -inf before sampling; EOS is allowed only where the grammar can
  // end, and is the only token once it has ended). Forced tokens are fed to it unmasked. With
  // grammar_after_think the constraint starts after think_end_id is generated (the reasoning
  // is free). Null: unconstrained.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  bool grammar_after_think = false;
  // The source `grammar` was compiled from (the server sets both): what `fathom router` ships
  // to its replicas, which compile it against their own vocabulary (a compiled grammar is
  // never sent). Null when `grammar` is null; the engine itself does not read it.
  std::shared_ptr<const grammar::GrammarSpec> grammar_spec;
  // The X-Forwarded-For a router sends its replicas with this request (the server sets it:
  // the client's chain and address); the engine does not read it.
  std::string forwarded_for;
};

// What a request sees: batches of new tokens, then one final event (which may carry the last
// tokens too). A consumer that passes the same StreamEvent to next()/try_next() every time
// hands its buffers back to the stream, so that steady streaming allocates nothing.
struct StreamEvent {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // one per token when requested, same order as tokens
  bool finished = false;
  FinishCause cause = FinishCause::kNone;
  Status error;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double queue_seconds = 0, first_token_seconds = 0;  // set on the first token event
};

// The consumer side of one request, shared by the engine (producer) and the consumer.
// Thread-safe. The engine pushes at most one event per step (one lock, one wake-up).
class RequestStream {
 public:
  // Waits for the next event (up to `timeout_ms`); false on timeout.
  bool next(StreamEvent* ev, int timeout_ms);
  // Takes the next event if one is queued; false otherwise. Never blocks.
  bool try_next(StreamEvent* ev);
  // Registers a callback run after events are queued (on the engine's thread, with no lock
  // held): it must be cheap and must not block, e.g. post a wake-up to an event loop. It runs
  // at once if events are already queued. The consumer then drains with try_next().
  void set_waker(std::function<void()> waker);
  // Asks the engine to stop this request at its next step (client gone).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // The producer side (the engine, or the router's upstream reader): copies `ev` into a
  // recycled slot (no allocation once the slots' buffers have grown) and wakes the consumer.
  void push(const StreamEvent& ev);

 private:
  bool pop(StreamEvent* ev);  // REQUIRES: mu_ held
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StreamEvent> ring_;  // guarded by mu_: a queue of count_ events from head_
  size_t head_ = 0, count_ = 0;    // guarded by mu_
  std::shared_ptr<const std::function<void()>> waker_;  // guarded by mu_
  std::atomic<bool> cancelled_{false};
};

}  // namespace fathom::engine
