// A small blocking HTTP/1.1 client for the router's link to its replicas: one exchange per
// connection (Connection: close), the response body read incrementally (chunked, sized or
// up to the close) so an SSE stream can be consumed line by line. Every wait is bounded; a
// reader can stop early (its client left) between polls.
//
// An HttpExchange belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom::router {

// Where a replica listens: http://HOST:PORT (an optional trailing slash; no path, no TLS).
struct Endpoint {
  std::string host;
  int port = 0;
  std::string url;  // as given, without a trailing slash
};
// kInvalidArgument naming what is wrong with `url`.
Result<Endpoint> parse_endpoint(std::string_view url);

class HttpExchange {
 public:
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  // Connects (within connect_timeout_ms), sends the request and reads the status line and
  // headers (within head_timeout_ms). `headers` are extra header lines, each ending in \r\n.
  // kIoError when the replica cannot be reached or answers no valid HTTP head in time.
  static Result<std::unique_ptr<HttpExchange>> start(const Endpoint& to, std::string_view method,
                                                     std::string_view path, std::string_view body,
                                                     std::string_view headers,
                                                     int connect_timeout_ms, int head_timeout_ms);
  int status() const { return status_; }

  // The body's next line (without its \n or \r\n) into *line: true; false at the body's end
  // (a last line without a newline is returned first). kIoError when the connection breaks
  // before the body ends, no byte comes for idle_timeout_ms, or `stop` returns true (asked
  // about every poll_ms).
  Result<bool> read_line(std::string* line, int idle_timeout_ms,
                         const std::function<bool()>& stop = {}, int poll_ms = 50);
  // The rest of the body (at most max_bytes), within timeout_ms.
  Result<std::string> read_all(int timeout_ms, size_t max_bytes = size_t(1) << 20);

 private:
  explicit HttpExchange(int fd) : fd_(fd) {}
  // Reads more raw bytes into raw_ (waiting up to idle_ms, polling `stop`). 0 at EOF.
  Result<size_t> fill(int idle_ms, const std::function<bool()>& stop, int poll_ms);
  // Moves decoded body bytes from raw_ into body_; true when the body has ended.
  Result<bool> decode();
  Status read_head(int timeout_ms);

  int fd_ = -1;
  int status_ = 0;
  std::string raw_;   // bytes read and not yet decoded
  std::string body_;  // decoded body bytes not yet returned
  bool chunked_ = false, sized_ = false, ended_ = false, eof_ = false;
  int64_t remaining_ = 0;  // sized: body bytes left; chunked: bytes left in the chunk
  bool in_chunk_ = false;
};

}  // namespace fathom::router
