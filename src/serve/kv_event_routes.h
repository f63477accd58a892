// The KV event feed's HTTP side: GET /v1/kv_events?since=N[&instance=HEX] streams the prefix
// cache's block stored / removed events after id N as newline-delimited JSON (format:
// kv/kv_event_wire.h) and stays open, following new events as the engine publishes them;
// GET /v1/kv_snapshot answers every block cached now with the last event id it reflects.
// A stream begins with a start line ({"type":"start","instance","last_event_id"}); a follower
// that cannot continue from N (the ring lost its events, another instance, an id from the
// future) gets one resync line instead and the stream ends. A silent stream gets an empty line
// every few seconds.
//
// One KvEventRoutes per server, owned by it, built before listen(); a pump thread (owned)
// waits for the log's new events and wakes the open streams, so the engine thread never calls
// into the transport. stop() ends every stream (a draining server does not wait for them).
// Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kv/kv_event_log.h"
#include "serve/http_server.h"

namespace fathom::serve {

class KvEventRoutes {
 public:
  explicit KvEventRoutes(const kv::KvEventLog& log);
  ~KvEventRoutes();
  KvEventRoutes(const KvEventRoutes&) = delete;
  KvEventRoutes& operator=(const KvEventRoutes&) = delete;

  // Registers the two routes; `unauthorized` answers a request without a valid key (or
  // nothing). REQUIRES: before the server listens.
  void add_to(http::HttpServer& server,
              std::function<std::optional<http::Reply>(const http::Request&)> unauthorized);
  // Ends every open stream and refuses new ones; idempotent.
  void stop();

  class Stream;

 private:
  void pump();
  void attach(Stream* s);
  void detach(Stream* s);

  const kv::KvEventLog& log_;
  std::mutex mu_;
  std::vector<Stream*> streams_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread pump_;
};

}  // namespace fathom::serve
