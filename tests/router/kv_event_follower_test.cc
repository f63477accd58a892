// The router's KV event follower (router/kv_event_follower.h) against a scripted replica on
// loopback: it loads the snapshot, applies the events in order, and reloads the snapshot on a
// gap in the ids, on a resync line and on a start line of another instance (a restart); a
// replica without the feed (404) is left to prediction; a replica marked down has its view
// dropped. Also the ReplicaSet's probe clock and the context length it reads from the
// replicas' /v1/models, against the same scripted replica.
#include "router/kv_event_follower.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_event_wire.h"
#include "request_head.h"
#include "router/kv_index.h"
#include "router/replica_set.h"

namespace fathom::router {
namespace {

// Answers each request by `answer(request line)`: raw bytes, then closes. GET /health is 200
// while `healthy` (else 503); GET /v1/models is `models()` (default: a list of no models).
class Replica {
 public:
  explicit Replica(std::function<std::string(const std::string&)> answer,
                   const std::atomic<bool>* healthy = nullptr,
                   std::function<std::string()> models = {})
      : answer_(std::move(answer)), healthy_(healthy), models_(std::move(models)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 16);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_.load()) {
          if (c >= 0) ::close(c);
          return;
        }
        // A thread per connection: a slow answer holds up only its own exchange.
        connections_.emplace_back([this, c] { serve(c); });
      }
    });
  }
  void serve(int c) {
    const std::string req = loopback::read_request_head(c);
    const std::string line = req.substr(0, req.find("\r\n"));
    const bool up = healthy_ == nullptr || healthy_->load();
    std::string reply;
    if (line.rfind("GET /v1/models", 0) == 0)
      reply = models_ ? models_()
                      : std::string(
                            "HTTP/1.1 200 OK\r\nContent-Length: 28\r\n\r\n"
                            "{\"object\":\"list\",\"data\":[]}");
    else if (line.rfind("GET /health", 0) != 0)
      reply = answer_(line);
    else
      reply = up ? "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
                 : "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
    (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
    ::shutdown(c, SHUT_WR);
    char buf[4096];
    while (::recv(c, buf, sizeof buf, 0) > 0) {
    }
    ::close(c);
  }
  ~Replica() {
    stop_.store(true);
    ::shutdown(fd_, SHUT_RDWR);
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port_));
    (void)::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::close(c);
    thread_.join();
    for (std::thread& t : connections_) t.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::function<std::string(const std::string&)> answer_;
  const std::atomic<bool>* healthy_;
  std::function<std::string()> models_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> connections_;  // the accept thread's only
};

std::string http(const std::string& status, const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         body;
}

std::string event(uint64_t id, bool stored, std::vector<uint64_t> hashes) {
  kv::KvEvent e;
  e.id = id;
  e.kind = stored ? kv::KvEventKind::kStored : kv::KvEventKind::kRemoved;
  e.hashes = std::move(hashes);
  std::string out;
  kv::append_kv_event_line(out, e);
  return out;
}

std::string start(uint64_t instance, uint64_t last) {
  return "{\"type\":\"start\",\"instance\":\"" + kv::block_hash_hex(instance) +
         "\",\"last_event_id\":" + std::to_string(last) + "}\n";
}

// Records what the follower hands over into a KvIndex (as the policy would).
struct Target : KvFeedTarget {
  std::mutex mu;
  KvIndex index{1};
  int snapshots = 0, events = 0, resyncs = 0, lost = 0, unsupported = 0;
  uint64_t last = 0;
  void kv_snapshot(size_t r, const kv::KvSnapshot& s) override {
    std::lock_guard<std::mutex> l(mu);
    index.load(r, s.blocks);
    ++snapshots;
    last = s.last_id;
  }
  void kv_event(size_t r, const kv::KvEvent& e) override {
    std::lock_guard<std::mutex> l(mu);
    index.apply(r, e);
    ++events;
    last = e.id;
  }
  void kv_lost(size_t r, bool resync) override {
    std::lock_guard<std::mutex> l(mu);
    if (resync) {
      ++resyncs;
    } else {
      index.clear(r);
      ++lost;
    }
  }
  void kv_unsupported(size_t) override {
    std::lock_guard<std::mutex> l(mu);
    ++unsupported;
  }
  std::vector<uint64_t> blocks() {
    std::lock_guard<std::mutex> l(mu);
    std::vector<uint64_t> b = index.hashes_of(0);
    std::sort(b.begin(), b.end());
    return b;
  }
};

bool wait_for(const std::function<bool()>& f) {
  for (int i = 0; i < 500; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

ReplicaSetOptions probes() {
  ReplicaSetOptions o;
  o.probe_interval_s = 0.05;
  o.log = false;
  return o;
}

KvFollowerOptions fast() {
  KvFollowerOptions o;
  o.retry_ms = 20;
  o.unsupported_retry_ms = 50;
  o.idle_timeout_ms = 2000;
  return o;
}

TEST(KvEventFollower, AppliesEventsAndResyncsOnAGapAResyncAndARestart) {
  std::mutex mu;
  int snapshots = 0, streams = 0;
  Replica rep([&](const std::string& line) {
    std::lock_guard<std::mutex> l(mu);
    if (line.rfind("GET /v1/kv_snapshot", 0) == 0) {
      const int k = snapshots++;
      kv::KvSnapshot s;
      s.instance = k < 3 ? 0xA : 0xB;
      s.last_id = k == 0 ? 2 : 5;
      s.blocks = k == 0  ? std::vector<std::pair<uint64_t, uint64_t>>{{1, 0}, {2, 1}}
                 : k < 3 ? std::vector<std::pair<uint64_t, uint64_t>>{{1, 0}, {3, 0}, {4, 3}}
                         : std::vector<std::pair<uint64_t, uint64_t>>{{9, 0}};
      return http("200 OK", kv::kv_snapshot_json(s));
    }
    const int k = streams++;
    switch (k) {
      case 0:  // event 3, then 5: a gap
        EXPECT_NE(line.find("since=2&instance=000000000000000a"), std::string::npos) << line;
        return http("200 OK", start(0xA, 2) + event(3, true, {3}) + "\n" + event(5, true, {5}));
      case 1:  // the replica says resync
        EXPECT_NE(line.find("since=5"), std::string::npos) << line;
        return http("200 OK",
                    "{\"type\":\"resync\",\"instance\":\"000000000000000a\","
                    "\"last_event_id\":9}\n");
      case 2:  // events 6 and 7 apply; then the stream ends
        return http("200 OK", start(0xA, 5) + event(6, false, {1}) + event(7, true, {7}));
      case 3:  // reconnects from 7: the replica restarted (another instance)
        EXPECT_NE(line.find("since=7"), std::string::npos) << line;
        return http("200 OK", start(0xB, 5));
      default:  // instance B from its snapshot: nothing new
        return http("200 OK", start(0xB, 5));
    }
  });
  ReplicaSet set({*parse_endpoint(rep.url())}, probes());
  Target t;
  {
    KvEventFollower f(0, set, t, fast());
    ASSERT_TRUE(wait_for([&] {
      std::lock_guard<std::mutex> l(mu);
      return streams >= 5;
    }));
  }
  EXPECT_EQ(t.snapshots, 4);
  EXPECT_EQ(t.resyncs, 3);                            // the gap, the resync line, the restart
  EXPECT_EQ(t.blocks(), (std::vector<uint64_t>{9}));  // instance B's snapshot
  EXPECT_EQ(t.events, 3);                             // 3 (before the gap), 6, 7
  EXPECT_EQ(t.unsupported, 0);
}

TEST(KvEventFollower, ReplicaWithoutAFeedIsPredicted) {
  Replica rep([](const std::string&) { return http("404 Not Found", "{}"); });
  ReplicaSet set({*parse_endpoint(rep.url())}, probes());
  Target t;
  KvEventFollower f(0, set, t, fast());
  EXPECT_TRUE(wait_for([&] {
    std::lock_guard<std::mutex> l(t.mu);
    return t.unsupported == 1;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // asks again, counted once
  std::lock_guard<std::mutex> l(t.mu);
  EXPECT_EQ(t.unsupported, 1);
  EXPECT_EQ(t.snapshots, 0);
}

TEST(KvEventFollower, ADownReplicasViewIsDropped) {
  std::atomic<bool> healthy{true};
  std::function<std::string(const std::string&)> answer = [&](const std::string& line) {
    if (line.rfind("GET /v1/kv_snapshot", 0) == 0) {
      kv::KvSnapshot s;
      s.instance = 1;
      s.last_id = 1;
      s.blocks = {{5, 0}};
      return http("200 OK", kv::kv_snapshot_json(s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return http("200 OK", start(1, 1));
  };
  Replica rep(answer, &healthy);
  ReplicaSet set({*parse_endpoint(rep.url())}, probes());
  Target t;
  KvEventFollower f(0, set, t, fast());
  ASSERT_TRUE(wait_for([&] { return t.blocks() == std::vector<uint64_t>{5}; }));
  healthy.store(false);  // the probes mark it down
  ASSERT_TRUE(wait_for([&] {
    std::lock_guard<std::mutex> l(t.mu);
    return t.lost >= 1;
  }));
  EXPECT_EQ(t.blocks(), std::vector<uint64_t>{});
  // Up again at the next probe: the snapshot is read again.
  healthy.store(true);
  ASSERT_TRUE(wait_for([&] {
    std::lock_guard<std::mutex> l(t.mu);
    return t.snapshots >= 2 && t.index.blocks(0) == 1;
  }));
}

// The clock behind --replica-down-abandon counts failing health probes only: a failed
// request marks a replica down but does not start it (its streams must not be abandoned for
// another request's failure); two failed probes in a row do, and a success stops it.
TEST(ReplicaSet, ProbeFailingSecondsCountsFailedProbesOnly) {
  std::atomic<bool> healthy{true};
  Replica rep([](const std::string&) { return http("404 Not Found", "{}"); }, &healthy);
  ReplicaSet set({*parse_endpoint(rep.url())}, probes());
  ASSERT_TRUE(wait_for([&] { return set.is_up(0); }));
  set.begin(0);
  set.end(0, true);  // a request failed on it: down until the next probe
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(set.probe_failing_seconds(0), 0.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  healthy = false;
  ASSERT_TRUE(wait_for([&] { return set.probe_failing_seconds(0) > 0.1; }));
  EXPECT_FALSE(set.is_up(0));
  healthy = true;
  ASSERT_TRUE(wait_for([&] { return set.probe_failing_seconds(0) == 0.0 && set.is_up(0); }));
}

// The context length the router serves: the smallest max_model_len the up replicas' /v1/models
// report (the smallest over a replica's models), read again every models_interval; a replica
// whose answer is not a usable one (not JSON, an error, no positive integer) adds nothing.
TEST(ReplicaSet, MaxModelLenIsTheSmallestThatTheUpReplicasReport) {
  std::mutex mu;
  std::string a_body = R"({"object":"list","data":[{"id":"x","max_model_len":4000},)"
                       R"({"id":"y","max_model_len":3000}]})";
  std::string b_body = R"({"data":[{"id":"x","max_model_len":2000}]})";
  std::atomic<bool> b_healthy{true};
  auto body = [&](const std::string* b) {
    return [&mu, b] {
      std::lock_guard<std::mutex> l(mu);
      return http("200 OK", *b);
    };
  };
  auto none = [](const std::string&) { return http("404 Not Found", "{}"); };
  Replica a(none, nullptr, body(&a_body)), b(none, &b_healthy, body(&b_body));
  ReplicaSetOptions o = probes();
  o.models_interval_s = 0.05;
  ReplicaSet set({*parse_endpoint(a.url()), *parse_endpoint(b.url())}, o);
  ASSERT_TRUE(wait_for([&] { return set.max_model_len() == 2000; })) << set.max_model_len();
  EXPECT_EQ(set.snapshot()[0].max_model_len, 3000);
  b_healthy = false;  // B down: A's
  ASSERT_TRUE(wait_for([&] { return set.max_model_len() == 3000; })) << set.max_model_len();
  {
    std::lock_guard<std::mutex> l(mu);
    a_body = R"({"data":[{"id":"x","max_model_len":2500}]})";
  }
  ASSERT_TRUE(wait_for([&] { return set.max_model_len() == 2500; })) << set.max_model_len();
  b_healthy = true;  // B back: its 2000 again
  ASSERT_TRUE(wait_for([&] { return set.max_model_len() == 2000; })) << set.max_model_len();

  // Hostile answers from a third replica: it reports nothing, the others' value stands.
  const std::vector<std::string> hostile = {
      http("200 OK", "not json"),
      http("200 OK", R"({"data":[{"max_model_len":"big"}]})"),
      http("200 OK", R"({"data":[{"max_model_len":-5},{"max_model_len":1}]})"),
      http("200 OK", R"({"data":[{"max_model_len":1e30}]})"),
      http("200 OK", R"({"data":[{"max_model_len":99999999999999999999999}]})"),
      http("200 OK", R"({"data":{"max_model_len":100}})"),
      http("200 OK", R"({"data":[{"max_model_len":100)"),
      http("500 Internal Server Error", R"({"data":[{"max_model_len":100}]})"),
      "HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n{\"data\":[]}",
  };
  for (const std::string& h : hostile) {
    std::atomic<int> reads{0};
    Replica c(none, nullptr, [&] {
      ++reads;
      return h;
    });
    ReplicaSet three({*parse_endpoint(a.url()), *parse_endpoint(b.url()), *parse_endpoint(c.url())},
                     o);
    ASSERT_TRUE(wait_for([&] { return three.max_model_len() == 2000 && reads.load() >= 2; }))
        << h << " -> " << three.max_model_len();
    EXPECT_EQ(three.snapshot()[2].max_model_len, 0) << h;
  }
}

// The context length is read beside the health probes: a replica whose /v1/models answers
// slowly (after the probe timeout, within the models timeout) delays no other replica's probe,
// and its answer is used.
TEST(ReplicaSet, ASlowModelsAnswerDelaysNoProbeAndIsUsed) {
  std::atomic<bool> answered{false};
  auto none = [](const std::string&) { return http("404 Not Found", "{}"); };
  Replica slow(none, nullptr, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    answered = true;
    return http("200 OK", R"({"data":[{"max_model_len":777}]})");
  });
  Replica other(none);
  ReplicaSetOptions o = probes();  // probe timeout 1 s
  ReplicaSet set({*parse_endpoint(slow.url()), *parse_endpoint(other.url())}, o);
  ASSERT_TRUE(wait_for([&] { return set.is_up(1); }));
  EXPECT_FALSE(answered.load()) << "the other replica's probe waited for the slow /v1/models";
  ASSERT_TRUE(wait_for([&] { return set.max_model_len() == 777; })) << set.max_model_len();
  EXPECT_TRUE(set.is_up(0));
}

// The replicas' /v1/models are read side by side: one that answers late (within the models
// timeout) delays no other replica's context length.
TEST(ReplicaSet, AHangingModelsAnswerDelaysNoOtherReplicasRead) {
  std::atomic<bool> answered{false};
  auto none = [](const std::string&) { return http("404 Not Found", "{}"); };
  Replica slow(none, nullptr, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    answered = true;
    return http("200 OK", R"({"data":[{"max_model_len":777}]})");
  });
  Replica other(none, nullptr,
                [] { return http("200 OK", R"({"data":[{"max_model_len":555}]})"); });
  ReplicaSet set({*parse_endpoint(slow.url()), *parse_endpoint(other.url())}, probes());
  ASSERT_TRUE(wait_for([&] { return set.max_model_len() == 555 || answered.load(); }));
  EXPECT_FALSE(answered.load()) << "the other replica's read waited for the slow one";
  EXPECT_EQ(set.max_model_len(), 555);
  ASSERT_TRUE(wait_for([&] { return set.snapshot()[0].max_model_len == 777; }));
  EXPECT_EQ(set.max_model_len(), 555);
}

}  // namespace
}  // namespace fathom::router
