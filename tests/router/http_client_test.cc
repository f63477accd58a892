// The router's HTTP clients — the blocking one and the asynchronous one, each case run through
// both — against a hand-driven peer on loopback (a socket this test writes raw bytes to): chunked
// bodies whose lines and chunk boundaries fall anywhere, sized bodies, bodies up to the close; and
// the failures a dying or hostile replica causes — a cut inside a chunk, silence, a non-HTTP
// answer, a refused connection — each a kIoError, never a hang.
#include "router/http_client.h"

// clang-format off
#include "router/async_http_client.h"  // first: Asio's headers, <utility> fixed before them
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
// clang-format on

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "request_head.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace fathom::router {
namespace {

// Accepts one connection, reads the request head, writes `parts` with short pauses (so the
// client sees them in separate reads), then waits `hold_ms` and closes.
class Peer {
 public:
  Peer(std::vector<std::string> parts, int hold_ms = 0, int pause_ms = 5) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 1);
    thread_ = std::thread([this, parts = std::move(parts), hold_ms, pause_ms] {
      int c = ::accept(fd_, nullptr, nullptr);
      const std::string req = loopback::read_request_head(c);
      for (const std::string& p : parts) {
        (void)::send(c, p.data(), p.size(), MSG_NOSIGNAL);
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
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

// What one exchange with a peer gave: the start's status, the HTTP status, the body's lines
// (or the whole body) and how reading ended. `async`: through AsyncHttpExchange, on an
// io_context run by this thread; else through the blocking HttpExchange.
struct Outcome {
  Status start;
  int status = 0;
  std::vector<std::string> lines;
  std::string body;
  Status end;
};
enum class Read { kLines, kAll, kNothing };

Outcome exchange(bool async, const Endpoint& to, Read how, int idle_ms = 1000,
                 std::function<bool()> stop = {}, int poll_ms = 50) {
  Outcome o;
  if (!async) {
    auto x = HttpExchange::start(to, "POST", "/v1/completions", "{}", "", 1000, 1000);
    if (!x.is_ok()) {
      o.start = x.status();
      return o;
    }
    o.status = (*x)->status();
    if (how == Read::kAll) {
      auto body = (*x)->read_all(idle_ms);
      if (body.is_ok()) o.body = *body;
      o.end = body.status();
    }
    std::string line;
    while (how == Read::kLines) {
      auto r = (*x)->read_line(&line, idle_ms, stop, poll_ms);
      if (!r.is_ok() || !*r) {
        o.end = r.status();
        break;
      }
      o.lines.push_back(line);
    }
    return o;
  }
  boost::asio::io_context io;
  boost::asio::co_spawn(
      io,
      [&]() -> AsyncHttpExchange::Awaitable<void> {
        auto x =
            co_await AsyncHttpExchange::start(to, "POST", "/v1/completions", "{}", "", 1000, 1000);
        if (!x.is_ok()) {
          o.start = x.status();
          co_return;
        }
        o.status = (*x)->status();
        if (how == Read::kAll) {
          auto body = co_await (*x)->read_all(idle_ms);
          if (body.is_ok()) o.body = *body;
          o.end = body.status();
        }
        std::string line;
        while (how == Read::kLines) {
          auto r = co_await (*x)->read_line(&line, idle_ms, stop, poll_ms);
          if (!r.is_ok() || !*r) {
            o.end = r.status();
            break;
          }
          o.lines.push_back(line);
        }
      },
      boost::asio::detached);
  io.run();
  return o;
}

class HttpClient : public testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(BlockingAndAsync, HttpClient, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& p) {
                           return p.param ? "Async" : "Blocking";
                         });

TEST_P(HttpClient, ChunkedLinesSplitAnywhereComeBackWhole) {
  Peer p(
      {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
       "7\r\ndata: a", "\r\n", "A\r\nbc\r\n\r\ndata", "\r\n9\r\n: [DO", "NE]\n\r\n",
       "3\r\nend\r\n0\r\n\r\n"});
  const Outcome o = exchange(GetParam(), p.endpoint(), Read::kLines);
  ASSERT_TRUE(o.start.is_ok()) << o.start.to_string();
  EXPECT_EQ(o.status, 200);
  EXPECT_EQ(o.lines, (std::vector<std::string>{"data: abc", "", "data: [DONE]", "end"}));
  EXPECT_TRUE(o.end.is_ok()) << o.end.to_string();
}

TEST_P(HttpClient, SizedAndCloseDelimitedBodies) {
  {
    Peer p({"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 11\r\n\r\n{\"e\":", "1}\nextra"});
    const Outcome o = exchange(GetParam(), p.endpoint(), Read::kAll);
    ASSERT_TRUE(o.start.is_ok());
    EXPECT_EQ(o.status, 503);
    ASSERT_TRUE(o.end.is_ok());
    EXPECT_EQ(o.body, "{\"e\":1}\next");  // 11 bytes, nothing past them
  }
  {
    Peer p({"HTTP/1.0 200 OK\r\n\r\nline one\nline", " two"});
    const Outcome o = exchange(GetParam(), p.endpoint(), Read::kLines);
    ASSERT_TRUE(o.start.is_ok());
    EXPECT_EQ(o.lines, (std::vector<std::string>{"line one", "line two"}));
    EXPECT_TRUE(o.end.is_ok());
  }
}

TEST_P(HttpClient, ACutInsideAChunkIsAnError) {
  Peer p({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "20\r\ndata: only part"});
  const Outcome o = exchange(GetParam(), p.endpoint(), Read::kLines);
  ASSERT_TRUE(o.start.is_ok());
  EXPECT_TRUE(o.lines.empty());
  EXPECT_EQ(o.end.code(), StatusCode::kIoError);
}

TEST_P(HttpClient, SilenceAndStopAreErrorsNotHangs) {
  {
    Peer p({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, 600);
    const Outcome o = exchange(GetParam(), p.endpoint(), Read::kLines, 200);
    EXPECT_EQ(o.end.code(), StatusCode::kIoError);
    EXPECT_NE(o.end.message().find("no data for 200 ms"), std::string::npos) << o.end.message();
  }
  {
    Peer p({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, 600);
    int asked = 0;
    const Outcome o = exchange(
        GetParam(), p.endpoint(), Read::kLines, 5000, [&] { return ++asked > 2; }, 10);
    EXPECT_EQ(o.end.code(), StatusCode::kIoError);
    EXPECT_EQ(o.end.message(), "stopped");
    EXPECT_GT(asked, 2);
  }
}

// A replica streaming a line that never ends: an error once the line passes kMaxLineBytes,
// not a buffer that grows (and is rescanned for its newline) as long as the bytes come.
TEST_P(HttpClient, AnEndlessLineIsAnErrorNotUnboundedMemory) {
  const size_t n = HttpResponseParser::kMaxLineBytes + (size_t(1) << 20);
  Peer p({"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ", std::string(n, 'x'),
          "\n"});
  const Outcome o = exchange(GetParam(), p.endpoint(), Read::kLines, 10000);
  ASSERT_TRUE(o.start.is_ok()) << o.start.to_string();
  EXPECT_TRUE(o.lines.empty());
  EXPECT_EQ(o.end.code(), StatusCode::kIoError);
  EXPECT_NE(o.end.message().find("longer than"), std::string::npos) << o.end.message();
}

// A chunk-size line that never ends is garbage, not a buffer to grow.
TEST_P(HttpClient, AnEndlessChunkSizeLineIsAnError) {
  Peer p({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", std::string(1 << 20, '1')});
  const Outcome o = exchange(GetParam(), p.endpoint(), Read::kLines, 5000);
  ASSERT_TRUE(o.start.is_ok()) << o.start.to_string();
  EXPECT_EQ(o.end.code(), StatusCode::kIoError);
  EXPECT_NE(o.end.message().find("bad chunk size"), std::string::npos) << o.end.message();
}

// The requests' exchange bounds a whole line by the idle timeout: a replica trickling a byte
// every 100 ms never idles 300 ms, but sends no line in 300 ms either.
TEST(AsyncHttpClient, ATrickledLineTimesOut) {
  std::vector<std::string> parts = {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"};
  for (int i = 0; i < 12; ++i) parts.push_back("d");
  parts.push_back("\n");
  Peer p(parts, 0, 100);
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome o = exchange(true, p.endpoint(), Read::kLines, 300);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(o.lines.empty());
  EXPECT_EQ(o.end.code(), StatusCode::kIoError);
  EXPECT_NE(o.end.message().find("no whole line for 300 ms"), std::string::npos) << o.end.message();
  EXPECT_LT(took, std::chrono::milliseconds(1000));
}

TEST_P(HttpClient, NonHttpAnswersAndRefusedConnectionsAreIoErrors) {
  {
    Peer p({"SSH-2.0-OpenSSH\r\n\r\n"});
    EXPECT_EQ(exchange(GetParam(), p.endpoint(), Read::kNothing).start.code(),
              StatusCode::kIoError);
  }
  {
    Peer p({"HTTP/1.1 200 OK\r\n"});  // closed before the head ends
    EXPECT_EQ(exchange(GetParam(), p.endpoint(), Read::kNothing).start.code(),
              StatusCode::kIoError);
  }
  int port = 0;
  {
    Peer p({}, 0);
    port = p.endpoint().port;
    (void)exchange(GetParam(), p.endpoint(), Read::kNothing);
  }
  auto e = parse_endpoint("http://127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(exchange(GetParam(), *e, Read::kNothing).start.code(), StatusCode::kIoError);
}

// The asynchronous exchanges of many requests share one thread: 24 peers stream at once, each
// its lines with pauses, and one thread running the io_context reads them all side by side.
TEST(AsyncHttpClient, ManyStreamsShareOneThread) {
  constexpr int kPeers = 24;
  std::vector<std::unique_ptr<Peer>> peers;
  for (int i = 0; i < kPeers; ++i)
    peers.push_back(std::make_unique<Peer>(std::vector<std::string>{
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "8\r\ndata: " + std::to_string(i % 10) + "\n\r\n", "9\r\ndata: x\n\n\r\n", "0\r\n\r\n"}));
  boost::asio::io_context io;
  std::vector<std::vector<std::string>> got(kPeers);
  int done = 0;
  for (int i = 0; i < kPeers; ++i) {
    boost::asio::co_spawn(
        io,
        [&, i]() -> AsyncHttpExchange::Awaitable<void> {
          const Endpoint to = peers[size_t(i)]->endpoint();
          auto x = co_await AsyncHttpExchange::start(to, "POST", "/", "{}", "", 2000, 2000);
          if (!x.is_ok()) co_return;
          std::string line;
          for (;;) {
            auto r = co_await (*x)->read_line(&line, 2000);
            if (!r.is_ok() || !*r) break;
            got[size_t(i)].push_back(line);
          }
          ++done;
        },
        boost::asio::detached);
  }
  io.run();  // this thread only
  EXPECT_EQ(done, kPeers);
  for (int i = 0; i < kPeers; ++i)
    EXPECT_EQ(got[size_t(i)],
              (std::vector<std::string>{"data: " + std::to_string(i % 10), "data: x", ""}))
        << i;
}

TEST(HttpEndpoint, ParsesOrSaysWhatIsWrong) {
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
