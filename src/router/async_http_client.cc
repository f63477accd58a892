#include "router/async_http_client.h"

// clang-format off
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
// clang-format on

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>

namespace fathom::router {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

enum class Cut { kNone, kStopped, kTimedOut };

// What a watchdog's timer handlers read: shared with them, so that one that runs after its
// watchdog (or the exchange) is gone finds `gen` moved on (or `done`) and does nothing.
// Allocated once per exchange and reused by each of its watchdogs.
struct WatchState {
  uint64_t gen = 0;  // the current watchdog's number; a handler armed by another ignores it
  bool done = true;  // no watchdog is watching
  Cut cut = Cut::kNone;
  tcp::socket* socket = nullptr;  // valid while !done
  Clock::time_point deadline;
  const AsyncHttpExchange::Stop* stop = nullptr;  // valid while !done
  Clock::duration poll{};
};

}  // namespace

struct AsyncHttpExchange::Io {
  explicit Io(const asio::any_io_executor& ex)
      : socket(ex), timer(ex), watch(std::make_shared<WatchState>()) {}
  tcp::socket socket;
  asio::steady_timer timer;  // the watchdog's
  std::shared_ptr<WatchState> watch;
  HttpResponseParser in;
  std::array<char, 16384> buf;
};

namespace {

// Watches one operation on an exchange's socket: at every poll_ms (or at the deadline) it asks
// `stop` and the clock, and cancels the socket's operations when either says so, which ends
// the operation with operation_aborted; cut() then says why. It lives on the exchange's
// executor, inside the coroutine awaiting the operation, one at a time per exchange, and
// allocates nothing (a stream reads through one per read).
class Watchdog {
 public:
  // `stop` must outlive the watchdog (it is asked only while the watchdog lives).
  Watchdog(AsyncHttpExchange::Io& io, Clock::time_point deadline,
           const AsyncHttpExchange::Stop& stop, int poll_ms)
      : timer_(io.timer), state_(*io.watch) {
    WatchState& s = state_;
    ++s.gen;
    s.done = false;
    s.cut = Cut::kNone;
    s.socket = &io.socket;
    s.deadline = deadline;
    s.stop = stop ? &stop : nullptr;
    s.poll = std::chrono::milliseconds(std::max(1, poll_ms));
    arm(io.watch, s.gen, timer_);
  }
  ~Watchdog() {
    state_.done = true;
    timer_.cancel();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  Cut cut() const { return state_.cut; }

 private:
  static void arm(const std::shared_ptr<WatchState>& s, uint64_t gen, asio::steady_timer& t) {
    Clock::time_point at = s->deadline;
    if (s->stop) at = std::min(at, Clock::now() + s->poll);
    t.expires_at(at);
    t.async_wait([s, gen, &t](const error_code& ec) {
      // Cancelled, or armed by a watchdog that is gone (its timer and exchange maybe too).
      if (ec || s->done || s->gen != gen) return;
      if (s->stop && (*s->stop)()) {
        s->cut = Cut::kStopped;
      } else if (Clock::now() >= s->deadline) {
        s->cut = Cut::kTimedOut;
      } else {
        arm(s, gen, t);
        return;
      }
      error_code ignored;
      s->socket->cancel(ignored);
    });
  }

  asio::steady_timer& timer_;
  WatchState& state_;
};

Status cut_error(Cut cut, const std::string& timed_out) {
  return io_error(cut == Cut::kStopped ? std::string("stopped") : timed_out);
}

// Reads more raw bytes into io.in (up to idle_ms, polling `stop`). 0 at EOF. When idle_ms
// passes, the error is "<timed_out> <timeout_ms> ms" (timeout_ms < 0: idle_ms), worded only
// then: a read is on every stream's path.
AsyncHttpExchange::Awaitable<Result<size_t>> fill(AsyncHttpExchange::Io& io, int idle_ms,
                                                  const AsyncHttpExchange::Stop& stop, int poll_ms,
                                                  const char* timed_out = "no data for",
                                                  int timeout_ms = -1) {
  // Asked before every read too: a stream whose bytes keep coming never idles for poll_ms.
  if (stop && stop()) co_return io_error("stopped");
  error_code ec;
  size_t n = 0;
  Cut cut = Cut::kNone;
  {
    Watchdog w(io, Clock::now() + std::chrono::milliseconds(idle_ms), stop, poll_ms);
    n = co_await io.socket.async_read_some(asio::buffer(io.buf),
                                           asio::redirect_error(asio::use_awaitable, ec));
    cut = w.cut();
  }
  if (cut != Cut::kNone)
    co_return cut_error(cut, std::string(timed_out) + " " +
                                 std::to_string(timeout_ms < 0 ? idle_ms : timeout_ms) + " ms");
  if (ec == asio::error::eof) {
    io.in.set_eof();
    co_return size_t(0);
  }
  if (ec) co_return io_error("connection broken: " + ec.message());
  io.in.append(io.buf.data(), n);
  co_return n;
}

}  // namespace

AsyncHttpExchange::AsyncHttpExchange(std::unique_ptr<Io> io) : io_(std::move(io)) {}
AsyncHttpExchange::~AsyncHttpExchange() = default;

int AsyncHttpExchange::status() const { return io_->in.status(); }

AsyncHttpExchange::Awaitable<Result<std::unique_ptr<AsyncHttpExchange>>> AsyncHttpExchange::start(
    const Endpoint& to, std::string_view method, std::string_view path, std::string_view body,
    std::string_view headers, int connect_timeout_ms, int head_timeout_ms, Stop stop) {
  auto io = std::make_unique<Io>(co_await asio::this_coro::executor);
  error_code ec;
  // The endpoints to try: an address as given, else what the name resolves to.
  std::vector<tcp::endpoint> targets;
  const asio::ip::address addr = asio::ip::make_address(to.host, ec);
  if (!ec) {
    targets.emplace_back(addr, uint16_t(to.port));
  } else {
    ec.clear();
    tcp::resolver resolver(io->socket.get_executor());
    auto found = co_await resolver.async_resolve(to.host, std::to_string(to.port),
                                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return io_error(to.url + ": cannot resolve " + to.host + ": " + ec.message());
    for (const auto& e : found) targets.push_back(e.endpoint());
  }
  Cut cut = Cut::kNone;
  {
    Watchdog w(*io, Clock::now() + std::chrono::milliseconds(connect_timeout_ms), stop, 50);
    co_await asio::async_connect(io->socket, targets,
                                 asio::redirect_error(asio::use_awaitable, ec));
    cut = w.cut();
  }
  if (cut != Cut::kNone)
    co_return io_error(to.url + ": " + cut_error(cut, "connect timed out").message());
  if (ec) co_return io_error(to.url + ": " + ec.message());
  io->socket.set_option(tcp::no_delay(true), ec);
  const auto head_deadline = Clock::now() + std::chrono::milliseconds(head_timeout_ms);
  const std::string req = http_request_text(to, method, path, body, headers);
  {
    Watchdog w(*io, head_deadline, stop, 50);
    co_await asio::async_write(io->socket, asio::buffer(req),
                               asio::redirect_error(asio::use_awaitable, ec));
    cut = w.cut();
  }
  if (cut != Cut::kNone)
    co_return io_error(to.url + ": " + cut_error(cut, "send timed out").message());
  if (ec) co_return io_error(to.url + ": send: " + ec.message());
  for (;;) {
    Result<bool> head = io->in.parse_head();
    if (!head.is_ok()) co_return io_error(to.url + ": " + head.status().message());
    if (*head) break;
    const int left = ms_until(head_deadline);
    if (left <= 0) co_return io_error(to.url + ": no response head in time");
    Result<size_t> n = co_await fill(*io, left, stop, 50);
    if (!n.is_ok()) co_return io_error(to.url + ": " + n.status().message());
  }
  co_return std::unique_ptr<AsyncHttpExchange>(new AsyncHttpExchange(std::move(io)));
}

AsyncHttpExchange::Awaitable<Result<bool>> AsyncHttpExchange::read_line(std::string* line,
                                                                        int idle_timeout_ms,
                                                                        Stop stop, int poll_ms) {
  // The whole line within the timeout, not each byte: a replica trickling a byte at a time
  // would otherwise hold the request forever.
  const auto deadline = Clock::now() + std::chrono::milliseconds(idle_timeout_ms);
  bool some = false;  // bytes came, not a whole line
  for (;;) {
    Result<HttpResponseParser::Next> next = io_->in.next_line(line);
    if (!next.is_ok()) co_return next.status();
    if (*next != HttpResponseParser::Next::kMore)
      co_return *next == HttpResponseParser::Next::kLine;
    const int left = ms_until(deadline);
    if (left <= 0)
      co_return io_error("no whole line for " + std::to_string(idle_timeout_ms) + " ms");
    Result<size_t> n = co_await fill(*io_, left, stop, poll_ms,
                                     some ? "no whole line for" : "no data for", idle_timeout_ms);
    if (!n.is_ok()) co_return n.status();  // 0: EOF, which the parser judges
    some = true;
  }
}

AsyncHttpExchange::Awaitable<Result<std::string>> AsyncHttpExchange::read_all(int timeout_ms,
                                                                              size_t max_bytes,
                                                                              Stop stop) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string out;
  for (;;) {
    Result<bool> ended = io_->in.take_body(&out, max_bytes);
    if (!ended.is_ok()) co_return ended.status();
    if (*ended) co_return std::move(out);
    const int left = ms_until(deadline);
    if (left <= 0) co_return io_error("response body timed out");
    Result<size_t> n = co_await fill(*io_, left, stop, 50);
    if (!n.is_ok()) co_return n.status();
  }
}

AsyncHttpExchange::Awaitable<Result<std::pair<int, std::string>>> async_post(
    const Endpoint& to, std::string_view path, std::string_view body, std::string_view headers,
    int connect_timeout_ms, int timeout_ms, AsyncHttpExchange::Stop stop) {
  auto x = co_await AsyncHttpExchange::start(to, "POST", path, body, headers, connect_timeout_ms,
                                             timeout_ms, stop);
  if (!x.is_ok()) co_return x.status();
  auto answer = co_await (*x)->read_all(timeout_ms, size_t(1) << 20, stop);
  if (!answer.is_ok()) co_return io_error(to.url + ": " + answer.status().message());
  co_return std::make_pair((*x)->status(), std::move(*answer));
}

}  // namespace fathom::router
