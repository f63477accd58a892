#include "router/kv_event_follower.h"

#include <chrono>
#include <cstdio>

#include "kv/kv_event_wire.h"

namespace fathom::router {

KvEventFollower::KvEventFollower(size_t replica, const ReplicaSet& replicas, KvFeedTarget& target,
                                 KvFollowerOptions options)
    : replica_(replica), replicas_(replicas), target_(target), opt_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

KvEventFollower::~KvEventFollower() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

bool KvEventFollower::up() const { return replicas_.is_up(replica_); }

void KvEventFollower::pause(int ms) {
  for (int t = 0; t < ms && !stop_.load(); t += 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void KvEventFollower::run() {
  while (!stop_.load()) {
    if (!up()) {
      if (have_view_) target_.kv_lost(replica_, false);
      have_view_ = false;
      pause(50);
      continue;
    }
    if (!have_view_ && !load_snapshot()) {
      pause(unsupported_ ? opt_.unsupported_retry_ms : opt_.retry_ms);
      continue;
    }
    if (!follow()) {
      // The feed can not continue from where this view stands: reload it (kept meanwhile).
      have_view_ = false;
      if (up() && !stop_.load()) target_.kv_lost(replica_, true);
      continue;
    }
    pause(opt_.retry_ms);  // the stream ended (the replica stops, or a cut): follow again
  }
}

bool KvEventFollower::load_snapshot() {
  const Endpoint& ep = replicas_.endpoint(replica_);
  auto ex = HttpExchange::start(ep, "GET", "/v1/kv_snapshot", "", opt_.auth_header,
                                opt_.connect_timeout_ms, opt_.head_timeout_ms);
  if (!ex.is_ok()) return false;
  if ((*ex)->status() == 404) {
    if (!unsupported_) target_.kv_unsupported(replica_);
    unsupported_ = true;
    return false;
  }
  if ((*ex)->status() != 200) return false;
  auto body = (*ex)->read_all(opt_.snapshot_timeout_ms, opt_.snapshot_max_bytes);
  if (!body.is_ok()) return false;
  auto snap = kv::parse_kv_snapshot(*body);
  if (!snap.is_ok()) {
    std::fprintf(stderr, "fathom router: %s: bad /v1/kv_snapshot: %s\n", ep.url.c_str(),
                 snap.status().message().c_str());
    return false;
  }
  unsupported_ = false;
  instance_ = snap->instance;
  last_id_ = snap->last_id;
  target_.kv_snapshot(replica_, *snap);
  have_view_ = true;
  return true;
}

bool KvEventFollower::follow() {
  const Endpoint& ep = replicas_.endpoint(replica_);
  const std::string path = "/v1/kv_events?since=" + std::to_string(last_id_) +
                           "&instance=" + kv::block_hash_hex(instance_);
  auto ex = HttpExchange::start(ep, "GET", path, "", opt_.auth_header, opt_.connect_timeout_ms,
                                opt_.head_timeout_ms);
  if (!ex.is_ok()) return true;  // unreachable: the probes decide whether it is down
  if ((*ex)->status() == 404) return false;
  if ((*ex)->status() != 200) return true;
  const auto stop = [this] { return stop_.load() || !up(); };
  std::string line;
  for (;;) {
    auto more = (*ex)->read_line(&line, opt_.idle_timeout_ms, stop);
    if (!more.is_ok() || !*more) return true;  // cut, silent, stopped or down: see run()
    auto l = kv::parse_kv_feed_line(line);
    if (!l.is_ok()) {
      std::fprintf(stderr, "fathom router: %s: bad /v1/kv_events line: %s\n", ep.url.c_str(),
                   l.status().message().c_str());
      return false;
    }
    switch (l->kind) {
      case kv::KvFeedLine::Kind::kHeartbeat:
        break;
      case kv::KvFeedLine::Kind::kStart:
        if (l->instance != instance_) return false;  // restarted between the two requests
        break;
      case kv::KvFeedLine::Kind::kResync:
        return false;
      case kv::KvFeedLine::Kind::kEvent:
        if (l->event.id <= last_id_) break;             // already applied (a reconnect)
        if (l->event.id != last_id_ + 1) return false;  // a gap
        target_.kv_event(replica_, l->event);
        last_id_ = l->event.id;
        break;
    }
  }
}

}  // namespace fathom::router
