#include "router/replica_set.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/py_json.h"

namespace fathom::router {

ReplicaSet::ReplicaSet(std::vector<Endpoint> replicas, ReplicaSetOptions options)
    : endpoints_(std::move(replicas)),
      opt_(std::move(options)),
      state_(endpoints_.size()),
      failing_since_ns_(new std::atomic<int64_t>[endpoints_.size()]),
      failed_probes_(new std::atomic<int>[endpoints_.size()]),
      models_read_ns_(endpoints_.size(), 0),
      models_due_(endpoints_.size(), 0),
      models_reading_(endpoints_.size(), 0),
      models_readers_(endpoints_.size()) {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    failing_since_ns_[i].store(0);
    failed_probes_[i].store(0);
  }
  for (size_t i = 0; i < endpoints_.size(); ++i) state_[i].url = endpoints_[i].url;
  thread_ = std::thread([this] { prober(); });
  models_thread_ = std::thread([this] { models_reader(); });
}

ReplicaSet::~ReplicaSet() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  models_thread_.join();
  for (std::thread& r : models_readers_)
    if (r.joinable()) r.join();
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
    update_max_model_len();
    // Its context length is read again when it comes up (it may have restarted with another).
    if (up) models_due_[i] = 1;
  }
  if (up) cv_.notify_all();
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

void ReplicaSet::update_max_model_len() {
  int64_t up = 0, any = 0;
  for (const ReplicaState& r : state_) {
    if (r.max_model_len <= 0) continue;
    any = any == 0 ? r.max_model_len : std::min(any, r.max_model_len);
    if (r.up) up = up == 0 ? r.max_model_len : std::min(up, r.max_model_len);
  }
  max_model_len_.store(up > 0 ? up : any, std::memory_order_relaxed);
}

void ReplicaSet::set_max_model_len(size_t i, int64_t len) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_[i].max_model_len == len) return;
    state_[i].max_model_len = len;
    update_max_model_len();
  }
  if (opt_.log)
    std::fprintf(stderr, "fathom router: replica %s serves a context of %lld tokens\n",
                 endpoints_[i].url.c_str(), (long long)len);
}

int64_t ReplicaSet::read_max_model_len(size_t i) const {
  auto x = HttpExchange::start(endpoints_[i], "GET", "/v1/models", "", opt_.auth_header,
                               opt_.probe_timeout_ms, opt_.models_timeout_ms);
  if (!x.is_ok()) return 0;
  auto body = (*x)->read_all(opt_.models_timeout_ms, 1 << 20);
  if ((*x)->status() != 200 || !body.is_ok()) return 0;
  auto v = pyjson::parse(*body);
  const pyjson::Value* data = v.is_ok() && v->is_object() ? v->find("data") : nullptr;
  if (data == nullptr || !data->is_array()) return 0;
  int64_t len = 0;
  for (const pyjson::Value& m : data->items) {
    const pyjson::Value* l = m.is_object() ? m.find("max_model_len") : nullptr;
    int64_t n = 0;
    if (l == nullptr || !l->int_fits_int64(&n) || n < 2) continue;
    len = len == 0 ? n : std::min(len, n);
  }
  return len;
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

void ReplicaSet::models_reader() {
  const auto wake = std::chrono::duration<double>(std::min(opt_.probe_interval_s, 0.5));
  const int64_t interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(opt_.models_interval_s))
                               .count();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // The up replicas whose context length is due: come up since the last read (set_up marks
    // it), or read models_interval ago (a replica without /v1/models stays unknown).
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    // Each read runs on a thread of its own, so that a replica that hangs on /v1/models
    // delays no other's; a replica is read again once its last read has ended.
    std::vector<size_t> due;
    for (size_t i = 0; i < state_.size(); ++i) {
      if (!state_[i].up || models_reading_[i]) continue;
      if (models_due_[i] || now - models_read_ns_[i] >= interval) {
        models_due_[i] = 0;
        models_read_ns_[i] = now;
        models_reading_[i] = 1;
        due.push_back(i);
      }
    }
    lock.unlock();
    for (size_t i : due) {
      if (models_readers_[i].joinable()) models_readers_[i].join();  // its last read ended
      models_readers_[i] = std::thread([this, i] {
        if (const int64_t len = read_max_model_len(i); len > 0) set_max_model_len(i, len);
        {
          std::lock_guard<std::mutex> l(mu_);
          models_reading_[i] = 0;
        }
        cv_.notify_all();
      });
    }
    lock.lock();
    cv_.wait_for(lock, wake, [this] {
      if (stop_) return true;
      for (size_t i = 0; i < models_due_.size(); ++i)
        if (models_due_[i] && state_[i].up && !models_reading_[i]) return true;
      return false;
    });
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
