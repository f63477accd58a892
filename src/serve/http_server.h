// HttpServer: the HTTP/1.1 transport under `fathom serve` — Boost.Beast over Asio with C++20
// coroutines, a handful of io threads and no thread per connection. It accepts connections
// (a cap on how many, with a 503 beyond it), reads each request with a header timeout, a body
// timeout and a body limit (413), finds the route by method and path (404, or 405 with an
// Allow header), runs the handler and writes its reply: a complete response, a body that
// arrives later (the client's disconnect is watched meanwhile and cancels the work), or an
// SSE stream written chunk by chunk as a Producer wakes the connection. stop() drains:
// no new connections, idle keep-alive connections closed, in-flight replies given
// `shutdown_timeout_s` to finish, then cancelled, then cut.
//
// Handlers run on a small worker pool (parsing, tokenizing and rendering a large body must
// not hold up an io thread), or on the io thread itself when registered as kInline (quick,
// never blocking: /health, /metrics).
//
// Thread-safety: route() and set_error_body() before listen(); listen() and run() from one
// thread; stop(), port() and stats() from any thread. Beast and Asio stay inside the .cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "serve/http_types.h"

namespace fathom::serve::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port
  size_t max_body_bytes = 32 << 20;
  double header_timeout_s = 10;  // the request line and headers, and idle keep-alive time
  double body_timeout_s = 60;    // the body, once the headers are in
  double write_timeout_s = 60;   // each write to a client that stopped reading
  double shutdown_timeout_s = 30;
  double stream_heartbeat_s = 15;  // a silent stream's heartbeat (Reply::heartbeat); 0 = never
  int max_connections = 4096;
  int io_threads = 2;
  int worker_threads = 2;
};

// What a handler returns: a complete response, or a Producer (with `response` holding the
// status and headers of a streamed reply, or nothing yet for a reply that is not streamed).
struct Reply {
  Response response;
  std::unique_ptr<Producer> producer;
  bool stream = false;  // the producer's bytes go out as they come (chunked transfer)
  // Bytes a stream silent for HttpServerOptions::stream_heartbeat_s gets (e.g. an SSE
  // comment), so clients and proxies with idle timeouts keep waiting; the first one sends the
  // status line and headers (Producer::committed()). Empty: none.
  std::string heartbeat;

  static Reply of(Response r) {
    Reply x;
    x.response = std::move(r);
    return x;
  }
};

using Handler = std::function<Reply(const Request&)>;
// The JSON body of an error the transport itself answers (404, 405, 413, 503, ...), in the
// shape of the API behind `path`.
using ErrorBody =
    std::function<std::string(std::string_view path, int status, const std::string& message)>;

enum class Dispatch { kWorker, kInline };

class HttpServer {
 public:
  struct Stats {
    int64_t connections = 0;            // open now
    int64_t accepted = 0;               // total
    int64_t rejected = 0;               // over max_connections (503)
    int64_t header_timeouts = 0;        // dropped before their headers were in
    int64_t client_disconnects = 0;     // went away while a reply was in progress
    int64_t cancelled_at_deadline = 0;  // replies cut by the shutdown deadline
    int64_t stream_heartbeats = 0;      // heartbeats written to silent streams
  };

  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void route(std::string method, std::string path, Handler handler,
             Dispatch dispatch = Dispatch::kWorker);
  void set_error_body(ErrorBody f);

  // Binds and listens (no SO_REUSEPORT: a port in use is an error, kIoError).
  Status listen();
  // The bound port, after listen().
  int port() const;
  // Serves until stop() has drained every connection. REQUIRES: listen() succeeded.
  void run();
  // Starts the graceful stop described above; returns at once. Safe before run(). A later
  // call ends the grace period at once: the replies still in flight are cancelled now.
  void stop();
  Stats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fathom::serve::http
