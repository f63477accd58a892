// Plain HTTP messages shared by the server transport (http_server.h) and, later, an HTTP
// client beside it (the router's upstream calls): a request as read off the wire, a complete
// response, and the Producer interface of a response that is produced over time (an SSE
// stream, or a body that waits for a generation). No Beast or Asio types: they stay in the
// transport's .cc so the rest of the tree does not compile them.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ascii.h"

namespace fathom::serve::http {

// ASCII case-insensitive equality (header names, and values such as a scheme or a coding).
using ascii::iequals;

// One request. Header names keep the client's spelling; header() compares them
// case-insensitively.
struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // the path and query as sent
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string peer;  // the client's address ("127.0.0.1", "::1"), "" when unknown

  // The path without the query string.
  std::string_view path() const;
  // The first header with this name (ASCII case-insensitive), or "".
  std::string_view header(std::string_view name) const;
};

// A complete response (or, for a streamed reply, the status line and headers).
struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  static Response json(int status, std::string body) {
    Response r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }
};

// A response produced over time. The transport owns it for one request; all calls come from
// the connection's own io strand, never two at once, except `wake`, which the producer may
// call from any thread (e.g. the engine's) and which must be cheap: it only schedules a
// poll() on the connection's strand.
class Producer {
 public:
  virtual ~Producer() = default;
  // Called once before the first poll(). `wake` stays valid (and harmless) for the
  // producer's whole life, even after the connection is gone.
  virtual void start(std::function<void()> wake) = 0;
  // Moves what is ready into `out`. A streamed reply appends bytes to out->body (its status
  // and headers go out with the first bytes); until it has produced any, it may instead fail
  // as a whole: set *out to a complete error response (status >= 400) and return true. A
  // reply that is not streamed sets *out to the complete response on the call that returns
  // true (nothing was sent before). Returns true when the response is complete (no poll()
  // follows). Never blocks.
  virtual bool poll(Response* out) = 0;
  // The client went away or the server's drain deadline passed: stop the work behind it
  // (e.g. cancel the engine request). The transport may then keep polling until poll()
  // returns true (at a drain deadline, so a stream ends with its final event) or drop the
  // producer (the client is gone). Idempotent.
  virtual void cancel() = 0;
  // The transport sent the status line and headers before the producer's first bytes (a
  // heartbeat): from here on the reply can no longer fail as a whole, and an error goes in
  // the stream.
  virtual void committed() {}
};

}  // namespace fathom::serve::http
