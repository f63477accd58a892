// The router's HTTP client against a hand-driven peer on loopback (a socket this test writes
// raw bytes to): chunked bodies whose lines and chunk boundaries fall anywhere, sized bodies,
// bodies up to the close; and the failures a dying or hostile replica causes — a cut inside a
// chunk, silence, a non-HTTP answer, a refused connection — each a kIoError, never a hang.
#include "router/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace fathom::router {
namespace {

// Accepts one connection, reads the request head, writes `parts` with short pauses (so the
// client sees them in separate reads), then waits `hold_ms` and closes.
class Peer {
 public:
  Peer(std::vector<std::string> parts, int hold_ms = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 1);
    thread_ = std::thread([this, parts = std::move(parts), hold_ms] {
      int c = ::accept(fd_, nullptr, nullptr);
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, size_t(n));
      }
      for (const std::string& p : parts) {
        (void)::send(c, p.data(), p.size(), MSG_NOSIGNAL);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
      ::close(c);
    });
  }
  ~Peer() {
    thread_.join();
    ::close(fd_);
  }
  Endpoint endpoint() const { return *parse_endpoint("http://127.0.0.1:" + std::to_string(port_)); }

 private:
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

Result<std::unique_ptr<HttpExchange>> post(const Peer& p) {
  return HttpExchange::start(p.endpoint(), "POST", "/v1/completions", "{}", "", 1000, 1000);
}

std::vector<std::string> lines_of(HttpExchange& x, Status* end) {
  std::vector<std::string> out;
  std::string line;
  for (;;) {
    auto r = x.read_line(&line, 1000);
    if (!r.is_ok()) {
      *end = r.status();
      return out;
    }
    if (!*r) return out;
    out.push_back(line);
  }
}

TEST(HttpClient, ChunkedLinesSplitAnywhereComeBackWhole) {
  Peer p(
      {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
       "7\r\ndata: a", "\r\n", "A\r\nbc\r\n\r\ndata", "\r\n9\r\n: [DO", "NE]\n\r\n",
       "3\r\nend\r\n0\r\n\r\n"});
  auto x = post(p);
  ASSERT_TRUE(x.is_ok()) << x.status().to_string();
  EXPECT_EQ((*x)->status(), 200);
  Status end;
  EXPECT_EQ(lines_of(**x, &end),
            (std::vector<std::string>{"data: abc", "", "data: [DONE]", "end"}));
  EXPECT_TRUE(end.is_ok()) << end.to_string();
}

TEST(HttpClient, SizedAndCloseDelimitedBodies) {
  {
    Peer p({"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 11\r\n\r\n{\"e\":", "1}\nextra"});
    auto x = post(p);
    ASSERT_TRUE(x.is_ok());
    EXPECT_EQ((*x)->status(), 503);
    auto body = (*x)->read_all(1000);
    ASSERT_TRUE(body.is_ok());
    EXPECT_EQ(*body, "{\"e\":1}\next");  // 11 bytes, nothing past them
  }
  {
    Peer p({"HTTP/1.0 200 OK\r\n\r\nline one\nline", " two"});
    auto x = post(p);
    ASSERT_TRUE(x.is_ok());
    Status end;
    EXPECT_EQ(lines_of(**x, &end), (std::vector<std::string>{"line one", "line two"}));
    EXPECT_TRUE(end.is_ok());
  }
}

TEST(HttpClient, ACutInsideAChunkIsAnError) {
  Peer p({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "20\r\ndata: only part"});
  auto x = post(p);
  ASSERT_TRUE(x.is_ok());
  Status end;
  (void)lines_of(**x, &end);
  EXPECT_EQ(end.code(), StatusCode::kIoError);
}

TEST(HttpClient, SilenceAndStopAreErrorsNotHangs) {
  {
    Peer p({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, 600);
    auto x = post(p);
    ASSERT_TRUE(x.is_ok());
    std::string line;
    auto r = (*x)->read_line(&line, 200);
    EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  }
  {
    Peer p({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, 600);
    auto x = post(p);
    ASSERT_TRUE(x.is_ok());
    std::string line;
    int asked = 0;
    auto r = (*x)->read_line(
        &line, 5000, [&] { return ++asked > 2; }, 10);
    EXPECT_EQ(r.status().code(), StatusCode::kIoError);
    EXPECT_GT(asked, 2);
  }
}

TEST(HttpClient, NonHttpAnswersAndRefusedConnectionsAreIoErrors) {
  {
    Peer p({"SSH-2.0-OpenSSH\r\n\r\n"});
    EXPECT_EQ(post(p).status().code(), StatusCode::kIoError);
  }
  {
    Peer p({"HTTP/1.1 200 OK\r\n"});  // closed before the head ends
    EXPECT_EQ(post(p).status().code(), StatusCode::kIoError);
  }
  int port = 0;
  {
    Peer p({}, 0);
    port = p.endpoint().port;
    (void)post(p);
  }
  auto e = parse_endpoint("http://127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(HttpExchange::start(*e, "GET", "/health", "", "", 500, 500).status().code(),
            StatusCode::kIoError);
}

TEST(HttpClient, EndpointsParseOrSayWhatIsWrong) {
  auto e = parse_endpoint("http://localhost:8000/");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->host, "localhost");
  EXPECT_EQ(e->port, 8000);
  EXPECT_EQ(e->url, "http://localhost:8000");
  auto v6 = parse_endpoint("http://[::1]:9");
  ASSERT_TRUE(v6.is_ok());
  EXPECT_EQ(v6->host, "::1");
  for (const char* bad : {"localhost:8000", "https://a:1", "http://a", "http://a:0",
                          "http://a:99999", "http://a:1/v1", "http://:80", "http://a:8x"})
    EXPECT_EQ(parse_endpoint(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace fathom::router
