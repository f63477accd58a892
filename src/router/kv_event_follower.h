// KvEventFollower: keeps the router's exact view of one Fathom replica's prefix cache. Its
// thread reads the replica's GET /v1/kv_snapshot, hands it to the target, then follows
// GET /v1/kv_events?since=<its last id>&instance=<its instance> and hands over each event in
// order. A gap in the ids, a resync line, a start line of another instance (the replica
// restarted) or a malformed line: the snapshot is read again. While the replica is marked down
// (ReplicaSet) its view is dropped; when it is up again the snapshot is read again. A replica
// that answers 404 (it publishes no events: --kv-events-ring 0, --no-prefix-cache, or not a
// Fathom replica) is left to prediction and asked again every few seconds.
//
// Owned by the RemoteGenerator, one per replica; the thread starts in the constructor and stops
// in the destructor: within ~0.1 s while it follows the stream, else when the request under
// way ends or times out (connect_timeout_ms, head_timeout_ms, snapshot_timeout_ms). The target
// is called from this thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <thread>

#include "kv/kv_event_log.h"
#include "router/http_client.h"
#include "router/replica_set.h"

namespace fathom::router {

// Where a follower's updates go (the RemoteGenerator: its routing policy, under its lock).
class KvFeedTarget {
 public:
  virtual ~KvFeedTarget() = default;
  virtual void kv_snapshot(size_t replica, const kv::KvSnapshot& snapshot) = 0;
  virtual void kv_event(size_t replica, const kv::KvEvent& event) = 0;
  // The view of the replica is gone (it is down) or must be reloaded (resync): counted.
  virtual void kv_lost(size_t replica, bool resync) = 0;
  // The replica publishes no events: its view is predicted.
  virtual void kv_unsupported(size_t replica) = 0;
};

struct KvFollowerOptions {
  std::string auth_header;  // e.g. "Authorization: Bearer K\r\n"
  int connect_timeout_ms = 2000;
  int head_timeout_ms = 10000;
  int snapshot_timeout_ms = 30000;
  size_t snapshot_max_bytes = size_t(1) << 30;
  int idle_timeout_ms = 15000;  // the replica sends an empty line every 3 s of silence
  int retry_ms = 200;           // after a failed connection
  int unsupported_retry_ms = 5000;
};

class KvEventFollower {
 public:
  KvEventFollower(size_t replica, const ReplicaSet& replicas, KvFeedTarget& target,
                  KvFollowerOptions options);
  ~KvEventFollower();
  KvEventFollower(const KvEventFollower&) = delete;
  KvEventFollower& operator=(const KvEventFollower&) = delete;

 private:
  void run();
  // Reads the snapshot into the target: true when it did.
  bool load_snapshot();
  // Follows the stream until it ends or fails; false when the view must be reloaded.
  bool follow();
  bool up() const;
  void pause(int ms);

  const size_t replica_;
  const ReplicaSet& replicas_;
  KvFeedTarget& target_;
  KvFollowerOptions opt_;
  uint64_t instance_ = 0, last_id_ = 0;
  bool have_view_ = false, unsupported_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fathom::router
