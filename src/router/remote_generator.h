// RemoteGenerator: the engine::Generator of `fathom router`. A request's token ids go to one
// replica (a token-id prompt, streamed, returning token ids; no text crosses the link), chosen
// by the routing policy among the replicas that are up; the replica's token ids come back as
// the request's events, so the router's server renders, parses and streams every protocol as
// `fathom serve` does. The replicas speak one upstream protocol (upstream.h): `fathom serve`'s
// /v1/completions (the default), vLLM's /v1/completions or SGLang's /generate.
//
// Failures: a replica that cannot be reached, answers 5xx or breaks its stream is marked down
// (ReplicaSet) and the request moves to another replica, at most max_attempts in all. Before
// the first token it simply starts again; after tokens, a single-choice request continues on
// the next replica with the tokens already produced as `resume_output_ids`: that replica's
// engine recomputes them as the decode steps that made them and streams what follows, so the
// client sees one uninterrupted stream and the output — greedy or seeded (random numbers keyed
// by (seed, sample, absolute position)), with penalties — is that of a run without the
// failure. vLLM and SGLang have no such field: there the tokens already produced are appended
// to the prompt (the stream is still uninterrupted, the output not bit-identical; README). A
// request of n > 1 samples that fails after tokens continues each unfinished choice on its own,
// as a one-sample request with its tokens so far and (fathom) its sample_index, so a seeded
// choice goes on as in the n-sample run.
//
// Cache-aware routing over Fathom replicas follows each replica's KV events (one
// KvEventFollower thread per replica, kv_event_follower.h) into the policy's exact index; other
// upstream kinds, and replicas that publish no events, are predicted (routing_policy.h).
//
// P/D disaggregation (fathom replicas that report --role prefill / decode in /health; see
// serve/pd_routes.h for the replica side): requests go to the decode-capable replicas as
// above (prefill replicas take requests only when nothing else is up). When the chosen replica
// decodes hand-offs, the prompt is at least pd_min_prompt_tokens long and the chosen replica
// would still have to prefill at least that many of its tokens (its predicted cache hit
// subtracted), the request is disaggregated (decode-first push): the router reserves a room on
// D, picks P among the prefill replicas (cache-aware: the most of the prompt cached, weighed
// against load), asks P to prefill and push the prompt's KV blocks into the room
// (pd_client.h), then sends the request to D with the room. A failed transfer is left to D's
// --kv-load-failure (recompute there, or a 503 kv_transfer_failed that ends the request with
// that error; D is not marked down). Retries and continuations prefill on D.
//
// Logprobs, stop token ids, the reasoning budget and structured outputs / strict tools pass
// through as id-level fields (upstream.h has the table per kind): a Fathom replica computes
// them exactly as it would alone — it compiles the grammar's source (grammar_spec) against its
// own vocabulary, and returns log probabilities by id, which the router's server renders as
// `fathom serve` does. A continuation keeps them: the new replica advances the grammar and the
// reasoning budget over the resumed tokens and sends logprobs only for what follows. A token
// that may end a choice (EOS, a stop id) is held back until the next update, so that it
// reaches the client in the final event with the finish, as an engine sends it.
//
// A decode replica that refuses the reservation (no KV pages for prompt + max_tokens) is passed
// over: the request goes to the next-best replica that can take it (another decode replica's
// hand-off, or a replica that prefills itself); only when none is left does it prefill on the
// first.
//
// Threads: requests do not get threads. Each is a C++20 coroutine on a strand of the
// router's io_context (io_threads threads, Asio, as `fathom serve`'s server), and every replica
// call it makes is an asynchronous exchange (async_http_client.h) watched for its timeouts and
// for its client leaving. A request of n > 1 continued after a failure runs one coroutine per
// unfinished choice, on the request's strand. The health prober (replica_set.h) and the KV
// event followers (one per replica) keep threads of their own. Every method may be called
// from any thread. The destructor stops the requests in flight and waits for them.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generator.h"
#include "kv/retention.h"
#include "router/kv_event_follower.h"
#include "router/replica_set.h"
#include "router/routing_policy.h"
#include "router/upstream.h"

namespace fathom::router {

struct RemoteGeneratorOptions {
  UpstreamKind upstream = UpstreamKind::kFathom;  // the replicas' protocol
  RoutingOptions routing;
  ReplicaSetOptions probes;
  std::string api_key;  // sent to the replicas as Authorization: Bearer (empty: none)
  int max_attempts = 3;
  int connect_timeout_ms = 2000;
  int head_timeout_ms = 30000;   // for the replica's response head
  int idle_timeout_ms = 120000;  // a replica silent this long mid-stream has failed
  // An attempt on a replica whose health probes have failed this long (two at least, none
  // succeeding) is abandoned and the request continues elsewhere (a hung replica's streams do
  // not wait idle_timeout_ms); failed requests do not count. 0: never.
  double abandon_down_after_s = 5;
  // A cap on the context length: the replicas' own (their /v1/models max_model_len) is used
  // when smaller.
  int64_t context_length = int64_t(1) << 20;
  int64_t vocab_size = 0;
  int32_t eos_id = -1;
  kv::RetentionPolicy retention;  // the class names requests carry to (fathom) replicas
  // cache_aware on fathom replicas: follow their KV events (else: prediction only).
  bool follow_kv_events = true;
  KvFollowerOptions kv_follower;
  // P/D: prompts shorter than this, or of which D would prefill fewer tokens, prefill on D.
  int64_t pd_min_prompt_tokens = 256;
  int pd_timeout_ms = 60000;  // the whole hand-off (reserve, P's prefill and push)
  int io_threads = 2;         // threads running the requests' coroutines
};

// A latency histogram of the P/D hand-off, seconds (fixed buckets; the owner guards it).
struct PdHistogram {
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1,     2.5,  5,     10,   30};
  std::array<int64_t, kBounds.size() + 1> counts{};  // per bucket, not cumulative
  int64_t count = 0;
  double sum = 0;
  void observe(double seconds) {
    size_t b = 0;
    while (b < kBounds.size() && seconds > kBounds[b]) ++b;
    ++counts[b];
    ++count;
    sum += seconds;
  }
};

// The KV event feed of one replica, as the router has followed it.
struct KvFeedStats {
  bool event_fed = false;  // its view is exact (else predicted)
  int64_t events_applied = 0, resyncs = 0, snapshot_loads = 0, lost = 0;
  int64_t index_blocks = 0;  // blocks its view holds now
  uint64_t last_event_id = 0;
};

struct RouterStats {
  int64_t requests = 0, attempts = 0, retries = 0, continuations = 0, failed = 0;
  int64_t prompt_blocks = 0, predicted_hit_blocks = 0, reported_cached_tokens = 0;
  // P/D: requests disaggregated (a hand-off tried), requests that could have been but were
  // prefilled on D (short, or mostly cached there), hand-offs whose transfer failed, bytes
  // pushed; P's push time and the whole hand-off's time (reserve, prefill, push).
  int64_t pd_disaggregated = 0, pd_local = 0, pd_failed = 0, pd_bytes = 0, pd_blocks = 0;
  // Reservations a decode replica refused (no room); the request then went to another replica.
  int64_t pd_refused = 0;
  PdHistogram pd_transfer_seconds, pd_handoff_seconds;
  // Block stores the exact index dropped, a replica's view being at its bound (KvIndex).
  int64_t index_dropped_blocks = 0;
};

class RemoteGenerator : public engine::Generator, private KvFeedTarget {
 public:
  // kInvalidArgument for a bad replica URL; REQUIRES: replicas is not empty.
  static Result<std::unique_ptr<RemoteGenerator>> create(const std::vector<std::string>& replicas,
                                                         RemoteGeneratorOptions options);
  ~RemoteGenerator() override;

  Result<std::vector<std::shared_ptr<engine::RequestStream>>> submit_n(
      engine::GenerationRequest request, int n) override;
  // The smaller of options.context_length and what the replicas serve (ReplicaSet's
  // max_model_len, when they report one).
  int64_t context_length() const override;
  int64_t vocab_size() const override { return opt_.vocab_size; }
  Health health() const override;
  std::string metrics_text() const override;

  const ReplicaSet& replicas() const { return *replicas_; }
  RouterStats stats() const;
  std::vector<KvFeedStats> kv_feed_stats() const;
  // The cache-aware view as JSON, for GET /v1/router/kv_index: per replica its url, "source"
  // ("events" or "predicted"), last_event_id, and its blocks (16-hex-digit hashes, sorted).
  // `query` "replica=I" restricts it to replica I; any other query is kInvalidArgument.
  Result<std::string> kv_index_json(std::string_view query) const;

  struct Job;

 private:
  struct Loop;    // the io_context and its threads
  struct Driver;  // the requests' coroutines (remote_generator.cc)

  // Whether replica i's health probes have failed for abandon_down_after_s (hung, not
  // refusing): the calls waiting on it are abandoned. And why, for the request's error.
  bool hung(size_t i) const;
  std::string hung_reason(size_t i) const;

  RemoteGenerator(std::vector<Endpoint> endpoints, RemoteGeneratorOptions options);
  // KvFeedTarget, from the followers' threads.
  void kv_snapshot(size_t replica, const kv::KvSnapshot& snapshot) override;
  void kv_event(size_t replica, const kv::KvEvent& event) override;
  void kv_lost(size_t replica, bool resync) override;
  void kv_unsupported(size_t replica) override;

  RemoteGeneratorOptions opt_;
  std::unique_ptr<ReplicaSet> replicas_;
  mutable std::mutex mu_;
  RoutingPolicy policy_;         // guarded by mu_
  RouterStats stats_;            // guarded by mu_
  std::vector<KvFeedStats> kv_;  // guarded by mu_; per replica
  std::condition_variable done_cv_;
  int64_t active_ = 0;  // guarded by mu_: requests running
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> attempt_ids_{0};  // numbers each attempt's request id (sglang's rid)
  uint64_t id_base_ = 0;                  // random: request ids differ between routers
  std::unique_ptr<Loop> loop_;
  // Last: they call back into the members above, so they stop first.
  std::vector<std::unique_ptr<KvEventFollower>> followers_;
};

}  // namespace fathom::router
