// The router's replicas: their addresses, whether each is up (a prober thread asks each one's
// /health every probe_interval; a request that fails on a replica marks it down at once — the
// circuit opens — until a probe sees it healthy again), the requests each has in flight, and
// the context length each serves (a second thread has `max_model_len` read from an up
// replica's /v1/models when it comes up, and again every models_interval, each read on a
// thread of its own, so a slow answer there delays neither the health probes nor another
// replica's read).
//
// Thread-safe: every method may be called from any thread (one short lock). The prober,
// models and reader threads are owned: they start in the constructor (the readers in the
// models thread) and stop in the destructor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "router/http_client.h"

namespace fathom::router {

struct ReplicaSetOptions {
  double probe_interval_s = 0.5;
  int probe_timeout_ms = 1000;
  double models_interval_s = 10;  // how often an up replica's /v1/models is read again
  int models_timeout_ms = 5000;   // for its answer
  std::string auth_header;        // e.g. "Authorization: Bearer K\r\n", sent with every probe
  bool log = true;                // a line on stderr when a replica goes up or down
};

struct ReplicaState {
  std::string url;
  bool up = false;
  int64_t in_flight = 0;
  int64_t routed = 0;    // attempts sent to it
  int64_t failures = 0;  // attempts that failed on it (connection, 5xx, stream cut)
  // Its P/D role as its /health reports it ("prefill", "decode"; "both" when it names none,
  // as vLLM and SGLang do).
  std::string role = "both";
  // The context length its GET /v1/models reports (`max_model_len`, as Fathom, vLLM and SGLang
  // write it; the smallest over its models); 0 while not known.
  int64_t max_model_len = 0;
};

class ReplicaSet {
 public:
  ReplicaSet(std::vector<Endpoint> replicas, ReplicaSetOptions options);
  ~ReplicaSet();
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  size_t size() const { return endpoints_.size(); }
  const Endpoint& endpoint(size_t i) const { return endpoints_[i]; }
  std::vector<ReplicaState> snapshot() const;
  bool any_up() const;
  // The context length a request may use on any replica it might be sent to: the smallest
  // max_model_len of the up replicas that report one (of all that have, when none of those is
  // up); 0 when none has reported one. Lock-free.
  int64_t max_model_len() const { return max_model_len_.load(std::memory_order_relaxed); }
  bool is_up(size_t i) const;
  // Seconds the health probes of replica i have failed without a success in between, from
  // the first of them; 0 unless at least two have (a failed request, or one slow probe, does
  // not count). Lock-free: asked on every read of a stream from it.
  double probe_failing_seconds(size_t i) const;
  // An attempt starts on replica i (in flight, routed) and ends (failed: marked down).
  void begin(size_t i);
  void end(size_t i, bool failed);

 private:
  // Probes every replica once (the prober thread only, every interval).
  void probe_all();
  void prober();
  void set_up(size_t i, bool up, const std::string& why);
  void set_role(size_t i, std::string role);
  // Reads replica i's /v1/models (its reader thread); 0 when it has no max_model_len.
  int64_t read_max_model_len(size_t i) const;
  void models_reader();
  void set_max_model_len(size_t i, int64_t len);
  void update_max_model_len();  // REQUIRES: mu_ held

  std::vector<Endpoint> endpoints_;
  ReplicaSetOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ReplicaState> state_;  // guarded by mu_
  // Records a probe's verdict for replica i (the prober thread only).
  void probe_result(size_t i, bool ok);
  // Per replica: the steady clock (ns) of the first failed probe since the last success (0:
  // none), and how many have failed since. Written by the prober thread only.
  std::unique_ptr<std::atomic<int64_t>[]> failing_since_ns_;
  std::unique_ptr<std::atomic<int>[]> failed_probes_;
  // Per replica, guarded by mu_: the steady clock (ns) when its /v1/models was last read, and
  // whether it is due now (it came up since).
  std::vector<int64_t> models_read_ns_;
  std::vector<char> models_due_;
  // Per replica: whether a read of its /v1/models is running (guarded by mu_), and the thread
  // that runs it (the models thread starts and joins them; the destructor joins the last).
  std::vector<char> models_reading_;
  std::vector<std::thread> models_readers_;
  std::atomic<int64_t> max_model_len_{0};
  bool stop_ = false;  // guarded by mu_
  std::thread thread_, models_thread_;
};

}  // namespace fathom::router
