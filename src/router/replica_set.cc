#include "router/replica_set.h"

#include <chrono>
#include <cstdio>

#include "core/py_json.h"

namespace fathom::router {

ReplicaSet::ReplicaSet(std::vector<Endpoint> replicas, ReplicaSetOptions options)
    : endpoints_(std::move(replicas)),
      opt_(std::move(options)),
      state_(endpoints_.size()),
      failing_since_ns_(new std::atomic<int64_t>[endpoints_.size()]),
      failed_probes_(new std::atomic<int>[endpoints_.size()]) {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    failing_since_ns_[i].store(0);
    failed_probes_[i].store(0);
  }
  for (size_t i = 0; i < endpoints_.size(); ++i) state_[i].url = endpoints_[i].url;
  thread_ = std::thread([this] { prober(); });
}

ReplicaSet::~ReplicaSet() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::vector<ReplicaState> ReplicaSet::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

bool ReplicaSet::is_up(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_[i].up;
}

double ReplicaSet::probe_failing_seconds(size_t i) const {
  const int64_t since = failing_since_ns_[i].load(std::memory_order_relaxed);
  if (since == 0 || failed_probes_[i].load(std::memory_order_relaxed) < 2) return 0;
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::chrono::duration<double>(std::chrono::steady_clock::duration(now - since)).count();
}

bool ReplicaSet::any_up() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ReplicaState& s : state_)
    if (s.up) return true;
  return false;
}

void ReplicaSet::begin(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  ++state_[i].in_flight;
  ++state_[i].routed;
}

void ReplicaSet::end(size_t i, bool failed) {
  bool was_up = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --state_[i].in_flight;
    if (!failed) return;
    ++state_[i].failures;
    was_up = state_[i].up;
  }
  if (was_up) set_up(i, false, "a request failed on it");
}

void ReplicaSet::set_up(size_t i, bool up, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_[i].up == up) return;
    state_[i].up = up;
  }
  if (opt_.log)
    std::fprintf(stderr, "fathom router: replica %s is %s%s%s\n", endpoints_[i].url.c_str(),
                 up ? "up" : "down", why.empty() ? "" : ": ", why.c_str());
}

void ReplicaSet::set_role(size_t i, std::string role) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_[i].role == role) return;
    state_[i].role = role;
  }
  if (opt_.log)
    std::fprintf(stderr, "fathom router: replica %s has the role %s\n", endpoints_[i].url.c_str(),
                 role.c_str());
}

void ReplicaSet::probe_result(size_t i, bool ok) {
  if (ok) {
    failed_probes_[i].store(0, std::memory_order_relaxed);
    failing_since_ns_[i].store(0, std::memory_order_relaxed);
    return;
  }
  if (failing_since_ns_[i].load(std::memory_order_relaxed) == 0)
    failing_since_ns_[i].store(std::chrono::steady_clock::now().time_since_epoch().count(),
                               std::memory_order_relaxed);
  failed_probes_[i].fetch_add(1, std::memory_order_relaxed);
}

void ReplicaSet::probe_all() {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    auto x = HttpExchange::start(endpoints_[i], "GET", "/health", "", opt_.auth_header,
                                 opt_.probe_timeout_ms, opt_.probe_timeout_ms);
    if (!x.is_ok()) {
      probe_result(i, false);
      set_up(i, false, x.status().message());
      continue;
    }
    // The body is small; a replica that sends none in time is as good as down.
    auto body = (*x)->read_all(opt_.probe_timeout_ms, 64 * 1024);
    const bool ok = (*x)->status() == 200 && body.is_ok();
    if (ok) {
      auto v = pyjson::parse(*body);
      const pyjson::Value* r = v.is_ok() && v->is_object() ? v->find("role") : nullptr;
      set_role(i, r != nullptr && r->is_string() && (r->text == "prefill" || r->text == "decode")
                      ? r->text
                      : "both");
    }
    probe_result(i, ok);
    set_up(i, ok, ok ? "" : "/health answered " + std::to_string((*x)->status()));
  }
}

void ReplicaSet::prober() {
  const auto interval = std::chrono::duration<double>(opt_.probe_interval_s);
  for (;;) {
    probe_all();
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, interval, [this] { return stop_; })) return;
  }
}

}  // namespace fathom::router
