#include "serve/kv_event_routes.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <string>
#include <string_view>

#include "kv/kv_event_wire.h"

namespace fathom::serve {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kEventsPerPoll = 1024;
constexpr auto kHeartbeatEvery = std::chrono::seconds(3);

// The value of `name` in the target's query string, if present.
std::optional<std::string_view> query_param(std::string_view target, std::string_view name) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == name)
      return eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return std::nullopt;
}

http::Reply bad_request(const std::string& message) {
  return http::Reply::of(http::Response::json(
      400, "{\"error\":{\"message\":\"" + message +
               "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}"));
}

}  // namespace

// One follower's stream. Polled on its connection's strand; woken by the pump thread.
class KvEventRoutes::Stream : public http::Producer {
 public:
  Stream(KvEventRoutes& routes, uint64_t since, uint64_t instance)
      : routes_(routes), since_(since), instance_(instance) {}
  ~Stream() override {
    if (attached_) routes_.detach(this);
  }

  void start(std::function<void()> wake) override {
    wake_ = std::move(wake);
    routes_.attach(this);
    attached_ = true;
  }
  void wake() { wake_(); }

  bool poll(http::Response* out) override {
    if (cancelled_ || routes_.stop_.load()) return true;
    kv::KvEventRead r = routes_.log_.read(since_, instance_, kEventsPerPoll);
    if (r.resync) {
      kv::append_kv_resync_line(out->body, routes_.log_.instance(), r.last_id);
      return true;
    }
    if (!started_) {
      started_ = true;
      out->body += "{\"type\":\"start\",\"instance\":\"" +
                   kv::block_hash_hex(routes_.log_.instance()) +
                   "\",\"last_event_id\":" + std::to_string(r.last_id) + "}\n";
    }
    for (const kv::KvEvent& e : r.events) {
      kv::append_kv_event_line(out->body, e);
      since_ = e.id;
    }
    if (r.events.size() == kEventsPerPoll) wake_();  // more are there: poll again
    const Clock::time_point now = Clock::now();
    if (!out->body.empty())
      last_write_ = now;
    else if (now - last_write_ >= kHeartbeatEvery) {
      out->body = "\n";
      last_write_ = now;
    }
    return false;
  }
  void cancel() override { cancelled_ = true; }

 private:
  KvEventRoutes& routes_;
  uint64_t since_, instance_;
  std::function<void()> wake_;
  bool attached_ = false, started_ = false, cancelled_ = false;
  Clock::time_point last_write_ = Clock::now();
};

KvEventRoutes::KvEventRoutes(const kv::KvEventLog& log) : log_(log) {
  pump_ = std::thread([this] { pump(); });
}

KvEventRoutes::~KvEventRoutes() {
  stop();
  if (pump_.joinable()) pump_.join();
}

void KvEventRoutes::stop() {
  if (stop_.exchange(true)) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (Stream* s : streams_) s->wake();
}

void KvEventRoutes::attach(Stream* s) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.push_back(s);
}

void KvEventRoutes::detach(Stream* s) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
}

void KvEventRoutes::pump() {
  uint64_t seen = log_.last_id();
  while (!stop_.load()) {
    // New events wake every stream at once; a quiet second wakes them for their heartbeat.
    seen = log_.wait(seen, std::chrono::milliseconds(1000));
    std::lock_guard<std::mutex> lock(mu_);
    for (Stream* s : streams_) s->wake();
  }
}

void KvEventRoutes::add_to(
    http::HttpServer& server,
    std::function<std::optional<http::Reply>(const http::Request&)> unauthorized) {
  server.route(
      "GET", "/v1/kv_events",
      [this, unauthorized](const http::Request& q) {
        if (auto r = unauthorized(q)) return std::move(*r);
        uint64_t since = 0, instance = 0;
        if (auto v = query_param(q.target, "since")) {
          auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), since);
          if (ec != std::errc() || p != v->data() + v->size() || v->empty())
            return bad_request("'since' must be an event id (a non-negative integer)");
        }
        if (auto v = query_param(q.target, "instance")) {
          auto h = kv::parse_block_hash_hex(*v);
          if (!h.is_ok()) return bad_request("'instance' must be 16 hex digits");
          instance = *h;
        }
        if (stop_.load())
          return http::Reply::of(http::Response::json(
              503,
              R"({"error":{"message":"the server is stopping","type":"server_error","param":null,"code":null}})"));
        http::Reply r;
        r.response.status = 200;
        r.response.content_type = "application/x-ndjson";
        r.response.headers.emplace_back("Cache-Control", "no-cache");
        r.stream = true;
        r.producer = std::make_unique<Stream>(*this, since, instance);
        return r;
      },
      http::Dispatch::kInline);
  server.route("GET", "/v1/kv_snapshot", [this, unauthorized](const http::Request& q) {
    if (auto r = unauthorized(q)) return std::move(*r);
    return http::Reply::of(http::Response::json(200, kv::kv_snapshot_json(log_.snapshot())));
  });
}

}  // namespace fathom::serve
