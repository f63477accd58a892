// The asynchronous side of the router's link to its replicas: one HTTP/1.1 exchange on its
// own connection (Connection: close), as C++20 coroutines on Asio — the same io layer as
// `fathom serve`'s server — so a request in flight costs a coroutine frame and a socket, not a
// thread. It behaves as the blocking HttpExchange (http_client.h), whose parser it shares:
// every wait is bounded, and a reader stops within poll_ms once `stop` returns true.
//
// An exchange and the coroutines awaiting it run on one executor: a strand, or an io_context
// run by one thread. The header carries Asio's awaitable: include it from .cc files only.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
// clang-format off
#include <boost/asio/awaitable.hpp>
#include <boost/asio/any_io_executor.hpp>
// clang-format on

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "router/http_client.h"

namespace fathom::router {

class AsyncHttpExchange {
 public:
  using Stop = std::function<bool()>;
  template <typename T>
  using Awaitable = boost::asio::awaitable<T, boost::asio::any_io_executor>;

  ~AsyncHttpExchange();
  AsyncHttpExchange(const AsyncHttpExchange&) = delete;
  AsyncHttpExchange& operator=(const AsyncHttpExchange&) = delete;

  // Connects (within connect_timeout_ms), sends the request and reads the status line and
  // headers (within head_timeout_ms), on the awaiting coroutine's executor. kIoError when the
  // replica cannot be reached, answers no valid HTTP head in time, or `stop` returned true.
  static Awaitable<Result<std::unique_ptr<AsyncHttpExchange>>> start(
      const Endpoint& to, std::string_view method, std::string_view path, std::string_view body,
      std::string_view headers, int connect_timeout_ms, int head_timeout_ms, Stop stop = {});
  int status() const;

  // As HttpExchange::read_line: the body's next line into *line (true), false at its end;
  // kIoError when the connection breaks, the line does not come whole within idle_timeout_ms
  // (bytes trickling in do not extend it), it passes HttpResponseParser::kMaxLineBytes, or
  // `stop`.
  Awaitable<Result<bool>> read_line(std::string* line, int idle_timeout_ms, Stop stop = {},
                                    int poll_ms = 50);
  // The rest of the body (at most max_bytes), within timeout_ms (or until `stop`).
  Awaitable<Result<std::string>> read_all(int timeout_ms, size_t max_bytes = size_t(1) << 20,
                                          Stop stop = {});

  struct Io;

 private:
  explicit AsyncHttpExchange(std::unique_ptr<Io> io);
  std::unique_ptr<Io> io_;
};

// One POST and its whole answer: (status, body). kIoError when it could not be completed.
AsyncHttpExchange::Awaitable<Result<std::pair<int, std::string>>> async_post(
    const Endpoint& to, std::string_view path, std::string_view body, std::string_view headers,
    int connect_timeout_ms, int timeout_ms, AsyncHttpExchange::Stop stop = {});

}  // namespace fathom::router
