#include "router/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/ascii.h"
#include "core/json_write.h"
#include "core/py_json.h"

namespace fathom::router {
namespace {

using Clock = std::chrono::steady_clock;

using ascii::iequals;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Connects a non-blocking socket to host:port within timeout_ms.
Result<int> connect_to(const Endpoint& to, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(to.port);
  if (int rc = ::getaddrinfo(to.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return io_error(to.url + ": cannot resolve " + to.host + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    int s = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) continue;
    int rc = ::connect(s, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s, POLLOUT, 0};
      rc = ::poll(&p, 1, timeout_ms);
      int err = 0;
      socklen_t len = sizeof err;
      if (rc == 1 && ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        why = rc == 0 ? "connect timed out" : std::strerror(err ? err : errno);
        rc = -1;
      }
    } else if (rc != 0) {
      why = std::strerror(errno);
    }
    if (rc == 0) {
      int one = 1;
      (void)::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fd = s;
    } else {
      ::close(s);
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return io_error(to.url + ": " + why);
  return fd;
}

Status send_all(int fd, std::string_view data, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(size_t(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return io_error(std::string("send: ") + std::strerror(errno));
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ms_until(deadline)) <= 0) return io_error("send timed out");
  }
  return Status::ok();
}

}  // namespace

Result<Endpoint> parse_endpoint(std::string_view url) {
  std::string_view u = url;
  if (u.substr(0, 7) != "http://")
    return invalid_argument("replica '" + std::string(url) + "': not an http://HOST:PORT URL");
  u.remove_prefix(7);
  if (!u.empty() && u.back() == '/') u.remove_suffix(1);
  const size_t colon = u.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || u.find('/') != std::string_view::npos)
    return invalid_argument("replica '" + std::string(url) + "': expected http://HOST:PORT");
  Endpoint e;
  e.host = std::string(u.substr(0, colon));
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']')
    e.host = e.host.substr(1, e.host.size() - 2);
  const std::string_view port = u.substr(colon + 1);
  int p = 0;
  for (char c : port) {
    if (c < '0' || c > '9' || p > 65535) {
      p = -1;
      break;
    }
    p = p * 10 + (c - '0');
  }
  if (port.empty() || p <= 0 || p > 65535)
    return invalid_argument("replica '" + std::string(url) + "': bad port");
  e.port = p;
  e.url = "http://" + std::string(u);
  return e;
}

int ms_until(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? int(left.count()) : 0;
}

std::string error_message_of(const pyjson::Value& v) {
  using pyjson::Value;
  if (!v.is_object()) return "";
  const Value* e = v.find("error");
  if (e && e->is_string()) return e->text;
  if (e && e->is_object())
    if (const Value* m = e->find("message"); m && m->is_string()) return m->text;
  if (const Value* m = v.find("message"); m && m->is_string()) return m->text;
  if (const Value* d = v.find("detail"))
    return d->is_string() ? d->text : pyjson::dumps(*d, false, true).substr(0, 400);
  return "";
}

std::string error_body_message(const std::string& body) {
  auto v = pyjson::parse(body);
  if (v.is_ok())
    if (std::string m = error_message_of(*v); !m.empty()) return m;
  return body.substr(0, 200);
}

std::string http_request_text(const Endpoint& to, std::string_view method, std::string_view path,
                              std::string_view body, std::string_view headers) {
  std::string req;
  req.reserve(256 + headers.size() + body.size());
  req.append(method).append(" ").append(path).append(" HTTP/1.1\r\nHost: ");
  req.append(to.host).append(":").append(std::to_string(to.port)).append("\r\n");
  req.append("Connection: close\r\n");
  if (!body.empty() || method == "POST") {
    req.append("Content-Type: application/json\r\nContent-Length: ");
    req.append(std::to_string(body.size())).append("\r\n");
  }
  req.append(headers).append("\r\n").append(body);
  return req;
}

Result<bool> HttpResponseParser::parse_head() {
  const size_t end = raw_.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (raw_.size() > 64 * 1024) return io_error("response head too large");
    if (eof_) return io_error("connection closed before the response head");
    return false;
  }
  std::string_view head(raw_.data(), end);
  const size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  if (status_line.substr(0, 5) != "HTTP/" || status_line.size() < 12)
    return io_error("not an HTTP response");
  status_ = std::atoi(std::string(status_line.substr(9, 3)).c_str());
  if (status_ < 100 || status_ > 599) return io_error("bad HTTP status");
  std::string_view rest = eol == std::string_view::npos ? "" : head.substr(eol + 2);
  while (!rest.empty()) {
    const size_t e = rest.find("\r\n");
    std::string_view line = rest.substr(0, e);
    rest = e == std::string_view::npos ? "" : rest.substr(e + 2);
    const size_t c = line.find(':');
    if (c == std::string_view::npos) continue;
    std::string_view name = trim(line.substr(0, c)), value = trim(line.substr(c + 1));
    if (iequals(name, "transfer-encoding") && value.find("chunked") != std::string_view::npos)
      chunked_ = true;
    if (iequals(name, "content-length")) {
      sized_ = true;
      remaining_ = std::atoll(std::string(value).c_str());
    }
  }
  if (chunked_) sized_ = false;
  raw_.erase(0, end + 4);
  return true;
}

Result<bool> HttpResponseParser::decode() {
  if (ended_) return true;
  if (!chunked_) {
    size_t take = raw_.size();
    if (sized_) take = std::min<size_t>(take, size_t(remaining_));
    body_.append(raw_, 0, take);
    raw_.erase(0, take);
    if (sized_) {
      remaining_ -= int64_t(take);
      if (remaining_ == 0) ended_ = true;
    }
    if (eof_) {
      if (sized_ && remaining_ > 0) return io_error("connection closed inside the body");
      ended_ = true;
    }
    return ended_;
  }
  for (;;) {
    if (!in_chunk_) {
      const size_t e = raw_.find("\r\n");
      // A chunk-size line (hex digits, maybe extensions) is short: a longer one is garbage.
      if (e == std::string::npos ? raw_.size() > 4096 : e > 4096) return io_error("bad chunk size");
      if (e == std::string::npos) break;
      char* endp = nullptr;
      const std::string size_text = raw_.substr(0, e);
      const long long n = std::strtoll(size_text.c_str(), &endp, 16);
      if (endp == size_text.c_str() || n < 0) return io_error("bad chunk size");
      raw_.erase(0, e + 2);
      if (n == 0) {
        ended_ = true;  // trailers, if any, are not read
        return true;
      }
      in_chunk_ = true;
      remaining_ = n;
    }
    if (remaining_ > 0) {
      const size_t take = std::min<size_t>(raw_.size(), size_t(remaining_));
      body_.append(raw_, 0, take);
      raw_.erase(0, take);
      remaining_ -= int64_t(take);
      if (remaining_ > 0) break;
    }
    if (raw_.size() < 2) break;  // the CRLF after the chunk's data
    raw_.erase(0, 2);
    in_chunk_ = false;
  }
  if (eof_) return io_error("connection closed inside the body");
  return false;
}

Result<HttpResponseParser::Next> HttpResponseParser::next_line(std::string* line) {
  auto take_line = [&](size_t nl) {
    size_t len = nl;
    if (len > 0 && body_[len - 1] == '\r') --len;
    line->assign(body_, 0, len);
    body_.erase(0, nl + 1);
    scanned_ = 0;
  };
  // Only the bytes not scanned yet: a long line arriving in many reads is scanned once.
  auto find_newline = [&] {
    const size_t nl = body_.find('\n', scanned_);
    scanned_ = nl == std::string::npos ? body_.size() : nl;
    return nl;
  };
  if (const size_t nl = find_newline(); nl != std::string::npos) {
    take_line(nl);
    return Next::kLine;
  }
  FATHOM_ASSIGN_OR_RETURN(bool ended, decode());
  if (const size_t nl = find_newline(); nl != std::string::npos) {
    take_line(nl);
    return Next::kLine;
  }
  if (body_.size() > kMaxLineBytes)
    return io_error("a body line longer than " + std::to_string(kMaxLineBytes) + " bytes");
  if (!ended) return Next::kMore;
  if (body_.empty()) return Next::kEnd;
  line->swap(body_);
  body_.clear();
  scanned_ = 0;
  return Next::kLine;
}

Result<bool> HttpResponseParser::take_body(std::string* out, size_t max_bytes) {
  FATHOM_ASSIGN_OR_RETURN(bool ended, decode());
  if (body_.size() > max_bytes) return io_error("response body too large");
  if (!ended) return false;
  *out = std::move(body_);
  body_.clear();
  return true;
}

HttpExchange::~HttpExchange() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<HttpExchange>> HttpExchange::start(
    const Endpoint& to, std::string_view method, std::string_view path, std::string_view body,
    std::string_view headers, int connect_timeout_ms, int head_timeout_ms) {
  FATHOM_ASSIGN_OR_RETURN(int fd, connect_to(to, connect_timeout_ms));
  std::unique_ptr<HttpExchange> x(new HttpExchange(fd));
  const std::string req = http_request_text(to, method, path, body, headers);
  if (Status s = send_all(fd, req, head_timeout_ms); !s.is_ok())
    return io_error(to.url + ": " + s.message());
  if (Status s = x->read_head(head_timeout_ms); !s.is_ok())
    return io_error(to.url + ": " + s.message());
  return x;
}

Result<size_t> HttpExchange::fill(int idle_ms, const std::function<bool()>& stop, int poll_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(idle_ms);
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      in_.append(buf, size_t(n));
      return size_t(n);
    }
    if (n == 0) {
      in_.set_eof();
      return size_t(0);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return io_error(std::string("connection broken: ") + std::strerror(errno));
    if (stop && stop()) return io_error("stopped");
    const int left = ms_until(deadline);
    if (left <= 0) return io_error("no data for " + std::to_string(idle_ms) + " ms");
    pollfd p{fd_, POLLIN, 0};
    (void)::poll(&p, 1, stop ? std::min(left, poll_ms) : left);
  }
}

Status HttpExchange::read_head(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool done, in_.parse_head());
    if (done) return Status::ok();
    const int left = ms_until(deadline);
    if (left <= 0) return io_error("no response head in time");
    FATHOM_ASSIGN_OR_RETURN(size_t n, fill(left, {}, 50));
    (void)n;  // 0: EOF, which parse_head() judges
  }
}

Result<bool> HttpExchange::read_line(std::string* line, int idle_timeout_ms,
                                     const std::function<bool()>& stop, int poll_ms) {
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(HttpResponseParser::Next next, in_.next_line(line));
    if (next != HttpResponseParser::Next::kMore) return next == HttpResponseParser::Next::kLine;
    FATHOM_ASSIGN_OR_RETURN(size_t n, fill(idle_timeout_ms, stop, poll_ms));
    (void)n;  // 0: EOF, which the parser judges
  }
}

Result<std::string> HttpExchange::read_all(int timeout_ms, size_t max_bytes) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string out;
  for (;;) {
    FATHOM_ASSIGN_OR_RETURN(bool ended, in_.take_body(&out, max_bytes));
    if (ended) return out;
    const int left = ms_until(deadline);
    if (left <= 0) return io_error("response body timed out");
    FATHOM_ASSIGN_OR_RETURN(size_t n, fill(left, {}, 50));
    (void)n;
  }
}

}  // namespace fathom::router
