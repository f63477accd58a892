// The HTTP/1.1 client side of the router's link to its replicas: one exchange per connection
// (Connection: close), the response body read incrementally (chunked, sized or up to the
// close) so an SSE stream can be consumed line by line. Every wait is bounded; a reader can
// stop early (its client left) between polls. This header holds the transport-free parts and
// the blocking exchange; router/async_http_client.h the asynchronous one the requests use.
//
// An HttpExchange belongs to one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom::pyjson {
struct Value;
}  // namespace fathom::pyjson

namespace fathom::router {

// Where a replica listens: http://HOST:PORT (an optional trailing slash; no path, no TLS).
struct Endpoint {
  std::string host;
  int port = 0;
  std::string url;  // as given, without a trailing slash
};
// kInvalidArgument naming what is wrong with `url`.
Result<Endpoint> parse_endpoint(std::string_view url);

// The response side of one HTTP/1.1 exchange, as its bytes arrive: the status line and headers,
// then the body — chunked, sized or up to the close — decoded incrementally and handed out
// line by line or whole. Transport-free: the blocking HttpExchange below and the router's
// asynchronous exchange (async_http_client.h) feed it the bytes they read.
//
// Belongs to one thread at a time.
class HttpResponseParser {
 public:
  // Bytes read from the connection, and the connection's end.
  void append(const char* data, size_t n) { raw_.append(data, n); }
  void set_eof() { eof_ = true; }
  bool eof() const { return eof_; }

  // True once the status line and headers are in (status() is then valid); false while more
  // bytes are needed. kIoError for an answer that is not HTTP, a head over 64 KiB, or a
  // connection closed before the head ended.
  Result<bool> parse_head();
  int status() const { return status_; }

  // The longest body line next_line() accepts: a replica streaming more without a newline is
  // broken or hostile, and holding its bytes would grow the router without bound.
  static constexpr size_t kMaxLineBytes = size_t(16) << 20;

  enum class Next { kLine, kEnd, kMore };
  // The body's next line (without its \n or \r\n) into *line: kLine; kEnd at the body's end
  // (a last line without a newline comes first as a kLine); kMore when more bytes are needed.
  // kIoError when the body is malformed or cut (bad chunk size, closed inside the body), or a
  // line passes kMaxLineBytes. Each byte is scanned for the newline once.
  Result<Next> next_line(std::string* line);
  // The whole body into *out once it has ended: true; false while more bytes are needed.
  // kIoError when malformed or cut, or when it passes max_bytes.
  Result<bool> take_body(std::string* out, size_t max_bytes);

 private:
  // Moves decoded body bytes from raw_ into body_; true when the body has ended.
  Result<bool> decode();

  int status_ = 0;
  std::string raw_;     // bytes read and not yet decoded
  std::string body_;    // decoded body bytes not yet returned
  size_t scanned_ = 0;  // next_line: body_'s first bytes known to hold no newline
  bool chunked_ = false, sized_ = false, ended_ = false, eof_ = false;
  int64_t remaining_ = 0;  // sized: body bytes left; chunked: bytes left in the chunk
  bool in_chunk_ = false;
};

// The bytes of a request to `to`: the request line, Host, Connection: close, the JSON body's
// Content-Type and Content-Length (for a body or a POST), `headers` (lines ending in \r\n).
std::string http_request_text(const Endpoint& to, std::string_view method, std::string_view path,
                              std::string_view body, std::string_view headers);

// Milliseconds from now until `deadline`; 0 once it has passed (a poll's or a timer's wait).
int ms_until(std::chrono::steady_clock::time_point deadline);

// The message of an error answer or event: {"error": {"message"}} (OpenAI, vLLM >= 0.11,
// SGLang, Fathom), {"error": "text"}, {"object": "error", "message"} (older vLLM), {"detail":
// ...} (FastAPI's 422); "" when it has none of them.
std::string error_message_of(const pyjson::Value& v);

// error_message_of() of a replica's error body; else the body itself, shortened.
std::string error_body_message(const std::string& body);

// A blocking exchange on its own connection (the probes, the KV event followers, P's push).
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
  int status() const { return in_.status(); }

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
  // Reads more raw bytes into the parser (waiting up to idle_ms, polling `stop`). 0 at EOF.
  Result<size_t> fill(int idle_ms, const std::function<bool()>& stop, int poll_ms);
  Status read_head(int timeout_ms);

  int fd_ = -1;
  HttpResponseParser in_;
};

}  // namespace fathom::router
