#include "serve/http_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <functional>
// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
// clang-format off
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
// clang-format on

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

namespace fathom::serve::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

// A timeout option as a clock duration: at most 1e9 s (about 31 years, "forever"; a larger
// double overflowed the clock's nanoseconds into a negative time, so a huge timeout acted as
// none), and 0 for a negative or NaN value (the options refuse both).
std::chrono::steady_clock::duration seconds(double s) {
  if (!(s > 0)) return std::chrono::steady_clock::duration::zero();
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::min(s, 1e9)));
}

// Wakes a connection's coroutine waiting for its Producer. wake() may run on any thread (the
// engine's), at any time, also after the connection ended: disarm() (on the strand) makes it
// a no-op from then on, so nothing is posted to a connection or io_context that is gone.
struct Wakeup : std::enable_shared_from_this<Wakeup> {
  std::mutex mu;
  std::optional<asio::any_io_executor> strand;  // guarded by mu; empty once disarmed
  std::atomic<bool> pending{false};
  asio::steady_timer* timer = nullptr;  // strand only

  void wake() {
    if (pending.exchange(true)) return;  // a wake-up is already on its way
    std::lock_guard<std::mutex> lock(mu);
    if (!strand) return;
    asio::post(*strand, [self = shared_from_this()] {
      if (self->timer != nullptr) self->timer->cancel();
    });
  }
  // On the strand.
  void poke() {
    if (timer != nullptr) timer->cancel();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu);
    strand.reset();
    timer = nullptr;
  }
};

// A body coding this server does not read, as (status, message): bodies are read as they
// come, so a compressed one (415) or a transfer coding other than chunked (501) is refused
// rather than parsed as JSON.
std::optional<std::pair<int, std::string>> unread_coding(const bhttp::request_header<>& h) {
  if (const auto ce = h[bhttp::field::content_encoding]; !ce.empty() && !iequals(ce, "identity"))
    return std::pair{415, "Content-Encoding '" + std::string(ce.substr(0, 64)) +
                              "' is not supported: send the body uncompressed"};
  if (const auto te = h[bhttp::field::transfer_encoding]; !te.empty() && !iequals(te, "chunked"))
    return std::pair{501, "Transfer-Encoding '" + std::string(te.substr(0, 64)) +
                              "' is not supported (only chunked)"};
  return std::nullopt;
}

// A request the parser refused (a bad request line, header, length or chunk), as opposed to
// a connection that closed, timed out or failed: the client is there to read a 400.
bool malformed(const error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message &&
         ec != bhttp::error::need_more && ec != bhttp::error::body_limit &&
         ec != bhttp::error::header_limit;
}

// The target with its path's percent-escapes in upper case, so a route matches either
// spelling: %2f and %2F are the same octet (RFC 3986 6.2.2.1), and clients send both.
std::string with_uppercase_escapes(std::string_view target) {
  std::string out(target);
  const size_t end = std::min(out.find('?'), out.size());
  for (size_t i = 0; i + 2 < end; ++i) {
    if (out[i] != '%' || !ascii::is_hex_digit(out[i + 1]) || !ascii::is_hex_digit(out[i + 2]))
      continue;
    out[i + 1] = ascii::to_upper(out[i + 1]);
    out[i + 2] = ascii::to_upper(out[i + 2]);
    i += 2;
  }
  return out;
}

}  // namespace

std::string_view Request::path() const {
  std::string_view t = target;
  const size_t q = t.find('?');
  return q == std::string_view::npos ? t : t.substr(0, q);
}

std::string_view Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

// One connection: its stream and what shutdown needs to reach it. Every field but the
// stream's socket is touched on the connection's strand only.
struct Conn {
  explicit Conn(tcp::socket s) : stream(std::move(s)) {
    error_code ec;
    const tcp::endpoint ep = stream.socket().remote_endpoint(ec);
    if (!ec) peer = ep.address().to_string();
  }
  beast::tcp_stream stream;
  std::string peer;                // the client's address
  bool idle = true;                // waiting for a request's first bytes
  bool cancel_requested = false;   // the drain deadline passed
  std::shared_ptr<Wakeup> wakeup;  // while a Producer runs
};

struct HttpServer::Impl {
  struct Route {
    Handler handler;
    Dispatch dispatch;
  };

  HttpServerOptions opt;
  asio::io_context io;
  asio::thread_pool workers;
  tcp::acceptor acceptor{io};
  std::map<std::string, std::map<std::string, Route>, std::less<>> routes;  // path -> method
  ErrorBody error_body;
  std::atomic<int> port{0};
  std::atomic<bool> stopping{false};
  std::atomic<bool> stop_posted{false};
  std::atomic<bool> hurry{false};  // a second stop(): the grace period ends at once

  std::mutex mu;
  std::unordered_set<std::shared_ptr<Conn>> conns;  // guarded by mu

  std::atomic<int64_t> accepted{0}, rejected{0}, header_timeouts{0}, disconnects{0},
      deadline_cancels{0}, heartbeats{0};

  explicit Impl(HttpServerOptions o)
      : opt(std::move(o)), workers(size_t(std::max(1, opt.worker_threads))) {}

  std::string error_json(std::string_view path, int status, const std::string& message) const {
    if (error_body) return error_body(path, status, message);
    std::string out = "{\"error\":{\"message\":\"";
    for (char ch : message)
      if (ch == '"' || ch == '\\' || uint8_t(ch) < 0x20)
        out += ' ';
      else
        out += ch;
    return out + "\"}}";
  }

  awaitable<void> accept_loop();
  awaitable<void> session(std::shared_ptr<Conn> c);
  awaitable<void> reject(std::shared_ptr<Conn> c);
  awaitable<void> drain();
  awaitable<bool> write_response(Conn& c, const Response& r, bool keep_alive);
  awaitable<bool> write_stream_head(Conn& c, const Reply& reply, bool keep_alive);
  awaitable<bool> produce(std::shared_ptr<Conn> c, Reply& reply, bool keep_alive);
  awaitable<void> close_after_error(Conn& c);
  // Answers a request the connection will not read on (a JSON error in the shape of the API
  // behind `target`'s path), then closes the connection.
  awaitable<void> refuse(Conn& c, const std::string& target, int status,
                         const std::string& message);
  Reply dispatch(const Request& req, bool* found);

  void forget(const std::shared_ptr<Conn>& c) {
    std::lock_guard<std::mutex> lock(mu);
    conns.erase(c);
  }
  size_t open_connections() {
    std::lock_guard<std::mutex> lock(mu);
    return conns.size();
  }
  // Runs f(conn) on every open connection's strand.
  template <typename F>
  void each_connection(F f) {
    std::vector<std::shared_ptr<Conn>> all;
    {
      std::lock_guard<std::mutex> lock(mu);
      all.assign(conns.begin(), conns.end());
    }
    for (auto& c : all) asio::post(c->stream.get_executor(), [c, f] { f(*c); });
  }
};

awaitable<void> HttpServer::Impl::accept_loop() {
  for (;;) {
    error_code ec;
    tcp::socket s = co_await acceptor.async_accept(asio::make_strand(io),
                                                   asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open() || stopping.load()) co_return;
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space) {
        // Out of file descriptors: back off rather than spin.
        asio::steady_timer t(io, std::chrono::milliseconds(50));
        co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      }
      continue;
    }
    s.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<Conn>(std::move(s));
    bool over = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      over = int64_t(conns.size()) >= opt.max_connections;
      if (!over) conns.insert(c);
    }
    if (over) {
      ++rejected;
      asio::co_spawn(c->stream.get_executor(), reject(c), asio::detached);
      continue;
    }
    ++accepted;
    asio::co_spawn(c->stream.get_executor(), session(c), asio::detached);
  }
}

// Over the connection cap: read the request head (briefly), answer 503, close.
awaitable<void> HttpServer::Impl::reject(std::shared_ptr<Conn> c) {
  beast::flat_buffer buf;
  bhttp::request_parser<bhttp::empty_body> parser;
  parser.header_limit(64 << 10);
  c->stream.expires_after(std::chrono::seconds(2));
  error_code ec;
  co_await bhttp::async_read_header(c->stream, buf, parser,
                                    asio::redirect_error(use_awaitable, ec));
  std::string path = ec ? std::string() : std::string(parser.get().target());
  const std::string msg = "the server is at its connection limit (" +
                          std::to_string(opt.max_connections) + "); retry later";
  Response r = Response::json(503, error_json(path, 503, msg));
  r.headers.emplace_back("Retry-After", "1");
  co_await write_response(*c, r, false);
  c->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  c->stream.close();
}

awaitable<bool> HttpServer::Impl::write_response(Conn& c, const Response& r, bool keep_alive) {
  bhttp::response<bhttp::string_body> res;
  res.version(11);
  res.result(unsigned(r.status));
  res.set(bhttp::field::server, "fathom");
  if (!r.content_type.empty()) res.set(bhttp::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) res.insert(k, v);
  res.keep_alive(keep_alive);
  res.body() = r.body;
  res.prepare_payload();
  c.stream.expires_after(seconds(opt.write_timeout_s));
  error_code ec;
  co_await bhttp::async_write(c.stream, res, asio::redirect_error(use_awaitable, ec));
  c.stream.expires_never();
  co_return !ec;
}

// After an error answered with Connection: close while the client may still be sending
// (a 413 before the body was read): stop sending, then read and drop what comes for a
// while, so the close does not turn into a reset that loses the response (as nginx's
// lingering close: while bytes keep coming, at most 2 s apart, for up to 20 s in all — a
// client uploading a large body on a loaded machine needs more than a moment).
awaitable<void> HttpServer::Impl::close_after_error(Conn& c) {
  error_code ec;
  c.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  const auto until = Clock::now() + std::chrono::seconds(20);
  std::vector<char> sink(65536);
  while (!ec && Clock::now() < until) {
    c.stream.expires_at(std::min(until, Clock::now() + std::chrono::seconds(2)));
    co_await c.stream.async_read_some(asio::buffer(sink), asio::redirect_error(use_awaitable, ec));
  }
  c.stream.close();
}

awaitable<void> HttpServer::Impl::refuse(Conn& c, const std::string& target, int status,
                                         const std::string& message) {
  Request probe;
  probe.target = target;
  co_await write_response(c, Response::json(status, error_json(probe.path(), status, message)),
                          false);
  co_await close_after_error(c);
}

Reply HttpServer::Impl::dispatch(const Request& req, bool* found) {
  *found = false;
  auto it = routes.find(req.path());
  if (it == routes.end()) {
    return Reply::of(Response::json(
        404, error_json(req.path(), 404, "no route for " + std::string(req.path()))));
  }
  auto m = it->second.find(req.method);
  if (m == it->second.end()) {
    std::string allow;
    for (const auto& [method, r] : it->second) allow += (allow.empty() ? "" : ", ") + method;
    Response r =
        Response::json(405, error_json(req.path(), 405,
                                       "method " + req.method + " not allowed for " +
                                           std::string(req.path()) + " (allowed: " + allow + ")"));
    r.headers.emplace_back("Allow", allow);
    return Reply::of(std::move(r));
  }
  *found = true;
  return {};
}

awaitable<void> HttpServer::Impl::session(std::shared_ptr<Conn> c) {
  beast::flat_buffer buf;
  const auto too_large = [this] {
    return "request body larger than " + std::to_string(opt.max_body_bytes) + " bytes";
  };
  for (;;) {
    if (stopping.load()) break;
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(64 << 10);
    parser.body_limit(uint64_t(opt.max_body_bytes));
    c->idle = true;
    c->stream.expires_after(seconds(opt.header_timeout_s));
    error_code ec;
    co_await bhttp::async_read_header(c->stream, buf, parser,
                                      asio::redirect_error(use_awaitable, ec));
    c->idle = false;
    if (ec == beast::error::timeout && buf.size() > 0) ++header_timeouts;
    const std::string target(parser.get().target());  // empty unless the request line was read
    if (ec == bhttp::error::body_limit ||
        (!ec && parser.content_length() && *parser.content_length() > opt.max_body_bytes)) {
      co_await refuse(*c, target, 413, too_large());
      break;
    }
    if (ec == bhttp::error::header_limit) {
      co_await refuse(*c, "", 431, "headers too large");
      break;
    }
    if (ec && malformed(ec)) {
      co_await refuse(*c, target, 400, "malformed HTTP request: " + ec.message());
      break;
    }
    if (ec) break;  // closed or timed out
    if (auto coding = unread_coding(parser.get())) {
      co_await refuse(*c, target, coding->first, coding->second);
      break;
    }
    if (iequals(parser.get()[bhttp::field::expect], "100-continue")) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await asio::async_write(c->stream, asio::buffer(kContinue, sizeof kContinue - 1),
                                 asio::redirect_error(use_awaitable, ec));
      if (ec) break;
    }
    // The body's deadline on a timer of its own that cancels the read: the stream's own
    // expiry closes the socket, and the 408 below could never be sent.
    struct BodyDeadline {
      bool armed = true, passed = false;
    };
    auto deadline = std::make_shared<BodyDeadline>();
    asio::steady_timer body_timer(c->stream.get_executor(), seconds(opt.body_timeout_s));
    body_timer.async_wait([deadline, c](error_code e) {
      if (e || !deadline->armed) return;
      deadline->passed = true;
      error_code ignored;
      c->stream.socket().cancel(ignored);
    });
    c->stream.expires_never();
    co_await bhttp::async_read(c->stream, buf, parser, asio::redirect_error(use_awaitable, ec));
    deadline->armed = false;
    body_timer.cancel();
    if (deadline->passed && ec == asio::error::operation_aborted) ec = beast::error::timeout;
    if (ec == bhttp::error::body_limit) {
      co_await refuse(*c, target, 413, too_large());
      break;
    }
    if (ec == beast::error::timeout) {
      co_await refuse(*c, target, 408, "the request body timed out");
      break;
    }
    if (ec && malformed(ec)) {  // e.g. bad chunk framing
      co_await refuse(*c, target, 400, "malformed HTTP request: " + ec.message());
      break;
    }
    if (ec) break;

    bhttp::request<bhttp::string_body> breq = parser.release();
    Request req;
    req.method = std::string(breq.method_string());
    req.target = with_uppercase_escapes(breq.target());
    for (const auto& f : breq) req.headers.emplace_back(f.name_string(), f.value());
    req.body = std::move(breq.body());
    req.peer = c->peer;
    bool keep_alive = breq.keep_alive();

    bool found = false;
    Reply reply = dispatch(req, &found);
    if (found) {
      const Route& route = routes.find(req.path())->second.find(req.method)->second;
      if (route.dispatch == Dispatch::kInline) {
        try {
          reply = route.handler(req);
        } catch (const std::exception& e) {
          reply = Reply::of(Response::json(500, error_json(req.path(), 500, e.what())));
        }
      } else {
        // On the worker pool; the coroutine resumes on this connection's strand.
        reply = co_await asio::co_spawn(
            workers.get_executor(),
            [&]() -> awaitable<Reply> {
              try {
                co_return route.handler(req);
              } catch (const std::exception& e) {
                co_return Reply::of(Response::json(500, error_json(req.path(), 500, e.what())));
              }
            },
            use_awaitable);
      }
    }
    if (stopping.load()) keep_alive = false;
    bool ok = false;
    if (reply.producer)
      ok = co_await produce(c, reply, keep_alive);
    else
      ok = co_await write_response(*c, reply.response, keep_alive);
    if (!ok || !keep_alive) break;
  }
  error_code ec;
  c->stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  c->stream.close();
  forget(c);
}

// The status line and headers of a streamed reply (chunked). False when the write failed.
awaitable<bool> HttpServer::Impl::write_stream_head(Conn& c, const Reply& reply, bool keep_alive) {
  bhttp::response<bhttp::empty_body> head;
  head.version(11);
  head.result(unsigned(reply.response.status));
  head.set(bhttp::field::server, "fathom");
  if (!reply.response.content_type.empty())
    head.set(bhttp::field::content_type, reply.response.content_type);
  for (const auto& [k, v] : reply.response.headers) head.insert(k, v);
  head.keep_alive(keep_alive);
  head.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> sr(head);
  error_code ec;
  c.stream.expires_after(seconds(opt.write_timeout_s));
  co_await bhttp::async_write_header(c.stream, sr, asio::redirect_error(use_awaitable, ec));
  c.stream.expires_never();
  co_return !ec;
}

// Runs a Producer to its end: wakes on the producer's wake(), on the client's disconnect (a
// readable socket with nothing to read) and on the drain deadline. False when the connection
// can not be used again.
awaitable<bool> HttpServer::Impl::produce(std::shared_ptr<Conn> c, Reply& reply, bool keep_alive) {
  Producer& p = *reply.producer;
  asio::steady_timer timer(c->stream.get_executor());
  auto wk = std::make_shared<Wakeup>();
  wk->strand = c->stream.get_executor();
  wk->timer = &timer;
  c->wakeup = wk;
  error_code ec;

  // The disconnect watch: completes when the socket turns readable. A peer that closed (or
  // reset) reads as end-of-file; bytes to read are a pipelined request, left for later. The
  // readiness may also be stale — an edge from the request's own bytes, which a read already
  // took, delivered late by another io thread — so "closed" is confirmed with a peek, and a
  // wake-up with nothing behind it re-arms the watch instead.
  struct Watch {
    bool active = false, closed = false;
    std::function<void()> arm;
  };
  auto watch = std::make_shared<Watch>();
  std::weak_ptr<Watch> weak = watch;
  watch->arm = [c, wk, weak] {
    auto w = weak.lock();
    if (!w) return;
    w->active = true;
    c->stream.socket().async_wait(tcp::socket::wait_read, [c, wk, weak](const error_code& e) {
      auto w2 = weak.lock();
      if (!w2) return;
      w2->active = false;
      if (e == asio::error::operation_aborted) return;
      if (!e) {
        char byte;
        const ssize_t r =
            ::recv(c->stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r > 0) return;  // a pipelined request
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          w2->arm();  // nothing there: a stale wake-up
          return;
        }
      }
      w2->closed = true;
      wk->poke();
    });
  };
  watch->arm();

  // A stream's status line and headers go out with its first bytes, not before: a producer
  // that fails before it has produced anything answers with a complete error response
  // instead (an HTTP error in the protocol's shape, not an error event inside a 200).
  bool sent_head = false, ok = true, cancelled = false;
  const bool heartbeat = opt.stream_heartbeat_s > 0 && !reply.heartbeat.empty();
  const auto heartbeat_every = seconds(opt.stream_heartbeat_s);
  auto last_write = Clock::now();
  p.start([wk] { wk->wake(); });
  Response out;
  bool done = false;
  while (ok) {
    if (watch->closed) {
      ++disconnects;
      ok = false;
      break;
    }
    if (c->cancel_requested && !cancelled) {
      ++deadline_cancels;
      cancelled = true;
      p.cancel();
    }
    out.body.clear();
    done = p.poll(&out);
    if (reply.stream && !sent_head && done && out.status >= 400) break;  // failed before it began
    // A stream silent for heartbeat_s (queued behind other work, or a long prefill) gets the
    // reply's heartbeat (an SSE comment), so clients and proxies with idle timeouts keep it;
    // the first heartbeat commits the status line, and later errors go in the stream.
    if (reply.stream && out.body.empty() && !done && heartbeat &&
        Clock::now() >= last_write + heartbeat_every) {
      out.body = reply.heartbeat;
      if (!sent_head) p.committed();
      ++heartbeats;
    }
    if (reply.stream && !sent_head && (!out.body.empty() || done)) {
      sent_head = co_await write_stream_head(*c, reply, keep_alive);
      if (!sent_head) {
        ++disconnects;
        ok = false;
        break;
      }
    }
    if (reply.stream && !out.body.empty()) {
      c->stream.expires_after(seconds(opt.write_timeout_s));
      co_await asio::async_write(c->stream, bhttp::make_chunk(asio::buffer(out.body)),
                                 asio::redirect_error(use_awaitable, ec));
      c->stream.expires_never();
      last_write = Clock::now();
      if (ec) {
        ++disconnects;
        ok = false;
        break;
      }
    }
    if (done) break;
    if (!wk->pending.exchange(false) && !watch->closed && !(c->cancel_requested && !cancelled)) {
      if (reply.stream && heartbeat)
        timer.expires_at(last_write + heartbeat_every);
      else
        timer.expires_at(asio::steady_timer::time_point::max());
      co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
    }
  }
  if (!done) p.cancel();
  wk->disarm();
  c->wakeup.reset();
  // Stop the watch before the connection reads again (or closes): cancel the wait and yield
  // to the strand until its aborted completion has run (a timer here cost every reply 1 ms).
  while (watch->active) {
    c->stream.socket().cancel(ec);
    co_await asio::post(c->stream.get_executor(), use_awaitable);
  }
  if (!ok || watch->closed) co_return false;
  if (reply.stream && sent_head) {
    c->stream.expires_after(seconds(opt.write_timeout_s));
    co_await asio::async_write(c->stream, bhttp::make_chunk_last(),
                               asio::redirect_error(use_awaitable, ec));
    c->stream.expires_never();
    co_return !ec && sent_head;
  }
  co_return co_await write_response(*c, out, keep_alive);
}

// Graceful stop: no new connections, idle ones closed, in-flight replies given the deadline,
// then cancelled (they end with their final event), then cut.
awaitable<void> HttpServer::Impl::drain() {
  error_code ec;
  acceptor.close(ec);
  auto close_idle = [](Conn& c) {
    if (c.idle) {
      error_code e;
      c.stream.socket().shutdown(tcp::socket::shutdown_both, e);
      c.stream.socket().close(e);
    }
  };
  asio::steady_timer t(io);
  // Until no connection is left, `until` passes or, in the grace period (`graceful`), a
  // second stop() asks to hurry.
  auto wait_until_empty = [&](Clock::time_point until, bool graceful) -> awaitable<bool> {
    while (open_connections() > 0 && Clock::now() < until && !(graceful && hurry.load())) {
      each_connection(close_idle);  // also those that went idle since
      t.expires_after(std::chrono::milliseconds(20));
      error_code e;
      co_await t.async_wait(asio::redirect_error(use_awaitable, e));
    }
    co_return open_connections() == 0;
  };
  const auto start = Clock::now();
  if (!co_await wait_until_empty(start + seconds(opt.shutdown_timeout_s), true)) {
    each_connection([](Conn& c) {
      c.cancel_requested = true;
      if (c.wakeup) c.wakeup->poke();
    });
    if (!co_await wait_until_empty(Clock::now() + std::chrono::seconds(2), false)) {
      each_connection([](Conn& c) {
        error_code e;
        c.stream.socket().close(e);
      });
      if (!co_await wait_until_empty(Clock::now() + std::chrono::seconds(1), false)) io.stop();
    }
  }
}

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() {
  impl_->io.stop();
  impl_->workers.join();
}

void HttpServer::route(std::string method, std::string path, Handler handler, Dispatch dispatch) {
  impl_->routes[std::move(path)][std::move(method)] = Impl::Route{std::move(handler), dispatch};
}

void HttpServer::set_error_body(ErrorBody f) { impl_->error_body = std::move(f); }

Status HttpServer::listen() {
  Impl& im = *impl_;
  error_code ec;
  auto addr = asio::ip::make_address(im.opt.host, ec);
  if (ec) {
    // A host name: resolve it.
    tcp::resolver r(im.io);
    auto results = r.resolve(im.opt.host, std::to_string(im.opt.port), ec);
    if (ec || results.empty()) return io_error("cannot resolve host " + im.opt.host);
    addr = results.begin()->endpoint().address();
  }
  const tcp::endpoint ep(addr, uint16_t(im.opt.port));
  im.acceptor.open(ep.protocol(), ec);
  // SO_REUSEADDR only (restarts do not wait out TIME_WAIT); without SO_REUSEPORT a port
  // another process listens on can not be bound.
  if (!ec) im.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code e;
    im.acceptor.close(e);
    return io_error("cannot listen on " + im.opt.host + ":" + std::to_string(im.opt.port) + ": " +
                    ec.message());
  }
  im.port.store(im.acceptor.local_endpoint().port());
  return Status::ok();
}

int HttpServer::port() const { return impl_->port.load(); }

void HttpServer::run() {
  Impl& im = *impl_;
  asio::co_spawn(im.io, im.accept_loop(), asio::detached);
  if (im.stopping.load() && !im.stop_posted.exchange(true))
    asio::co_spawn(im.io, im.drain(), asio::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < im.opt.io_threads; ++i) threads.emplace_back([&im] { im.io.run(); });
  im.io.run();
  for (auto& t : threads) t.join();
}

void HttpServer::stop() {
  Impl& im = *impl_;
  im.stopping.store(true);
  if (im.stop_posted.exchange(true))
    im.hurry.store(true);
  else
    asio::co_spawn(im.io, im.drain(), asio::detached);
}

HttpServer::Stats HttpServer::stats() const {
  Stats s;
  s.connections = int64_t(impl_->open_connections());
  s.accepted = impl_->accepted.load();
  s.rejected = impl_->rejected.load();
  s.header_timeouts = impl_->header_timeouts.load();
  s.client_disconnects = impl_->disconnects.load();
  s.cancelled_at_deadline = impl_->deadline_cancels.load();
  s.stream_heartbeats = impl_->heartbeats.load();
  return s;
}

}  // namespace fathom::serve::http
