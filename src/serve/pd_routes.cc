#include "serve/pd_routes.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <sstream>
#include <thread>
#include <utility>

#include "core/json_write.h"
#include "core/log.h"
#include "core/py_json.h"
#include "engine/generator.h"
#include "engine/kv_reservations.h"
#include "kv/pd_wire.h"
#include "kv/prefix_cache.h"
#include "kv/store.h"
#include "router/pd_client.h"

namespace fathom::serve {
namespace {

using Clock = std::chrono::steady_clock;
using http::Request;
using http::Response;
using pyjson::Value;

Response error(int status, const std::string& message, std::string_view type,
               std::string_view code) {
  std::string b = "{\"error\":{\"message\":";
  json::append_string(b, message);
  b += ",\"type\":";
  json::append_string(b, type);
  b += ",\"param\":null,\"code\":";
  json::append_string(b, code);
  b += "}}";
  return Response::json(status, std::move(b));
}
Response bad_request(const std::string& m) {
  return error(400, m, "invalid_request_error", "invalid_value");
}

bool good_room(std::string_view r) {
  if (r.empty() || r.size() > 96) return false;
  for (char c : r)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

std::string query_value(std::string_view target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return "";
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    if (kv.size() > key.size() && kv.substr(0, key.size()) == key && kv[key.size()] == '=')
      return std::string(kv.substr(key.size() + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return "";
}

// The fields every hand-off body shares: the room, the prompt's ids and the tenant salt.
struct PromptBody {
  Value json;
  std::string room, cache_salt;
  std::vector<int32_t> prompt;
};
Result<PromptBody> parse_prompt_body(const std::string& body, int64_t vocab) {
  PromptBody out;
  auto v = pyjson::parse(body);
  if (!v.is_ok() || !v->is_object()) return invalid_argument("the body must be a JSON object");
  out.json = std::move(*v);
  const Value* room = out.json.find("room");
  if (room == nullptr || !room->is_string() || !good_room(room->text))
    return invalid_argument("'room' must be 1..96 characters of [A-Za-z0-9_-]");
  out.room = room->text;
  const Value* p = out.json.find("prompt");
  if (p == nullptr || !p->is_array() || p->items.empty())
    return invalid_argument("'prompt' must be a non-empty list of token ids");
  out.prompt.reserve(p->items.size());
  for (const Value& x : p->items) {
    int64_t id = 0;
    if (!x.int_fits_int64(&id) || id < 0 || id >= vocab)
      return invalid_argument("'prompt' holds an id outside the vocabulary");
    out.prompt.push_back(int32_t(id));
  }
  if (const Value* s = out.json.find("cache_salt")) {
    if (!s->is_string()) return invalid_argument("'cache_salt' must be a string");
    out.cache_salt = s->text;
  }
  return out;
}

// The chained keys of the prompt blocks a request may resume from: blocks 1..(L-1)/B (the
// engine's hit rule with window side objects: at least one token is computed).
std::vector<uint64_t> resumable_chain(const std::vector<int32_t>& prompt, int64_t block,
                                      const std::string& cache_salt) {
  std::vector<uint64_t> chain = kv::prefix_block_hashes(prompt, block, kv::tenant_salt(cache_salt));
  const size_t h = size_t((int64_t(prompt.size()) - 1) / block);
  if (chain.size() > h) chain.resize(h);
  return chain;
}

}  // namespace

Result<PdRole> parse_pd_role(std::string_view name) {
  if (name == "both") return PdRole::kBoth;
  if (name == "prefill") return PdRole::kPrefill;
  if (name == "decode") return PdRole::kDecode;
  return invalid_argument("--role must be prefill, decode or both, not '" + std::string(name) +
                          "'");
}

const char* pd_role_name(PdRole r) {
  switch (r) {
    case PdRole::kPrefill:
      return "prefill";
    case PdRole::kDecode:
      return "decode";
    case PdRole::kBoth:
      break;
  }
  return "both";
}

// A reply that a job on a thread of its own produces (a prefill and its push take seconds;
// the transport's workers must not wait for them). The job's state outlives the producer.
class PdJob final : public http::Producer {
 public:
  struct State {
    std::mutex mu;
    bool done = false;
    Response response;
    std::function<void()> wake;
    std::atomic<bool> cancelled{false};
  };
  PdJob(PdRoutes* owner, std::string body) : owner_(owner), body_(std::move(body)) {}

  void start(std::function<void()> wake) override {
    state_->wake = std::move(wake);
    {
      std::lock_guard<std::mutex> lock(owner_->mu_);
      ++owner_->jobs_;
    }
    std::thread([owner = owner_, st = state_, body = std::move(body_)] {
      Response r = owner->prefill(body, st->cancelled);
      std::function<void()> wake_up;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        st->response = std::move(r);
        st->done = true;
        wake_up = st->wake;
      }
      wake_up();
      std::lock_guard<std::mutex> lock(owner->mu_);
      if (--owner->jobs_ == 0) owner->cv_.notify_all();
    }).detach();
  }
  bool poll(Response* out) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done) return false;
    *out = std::move(state_->response);
    return true;
  }
  void cancel() override { state_->cancelled.store(true); }

 private:
  PdRoutes* owner_;
  std::string body_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

PdRoutes::PdRoutes(engine::Generator& engine, PdOptions options)
    : engine_(engine), opt_(std::move(options)) {}

PdRoutes::~PdRoutes() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return jobs_ == 0; });
}

void PdRoutes::add_to(
    http::HttpServer& server,
    std::function<std::optional<http::Reply>(const http::Request&)> unauthorized) {
  using http::Reply;
  if (opt_.role == PdRole::kPrefill) {
    server.route("POST", "/v1/pd/prefill", [this, unauthorized](const Request& q) {
      if (auto r = unauthorized(q)) return std::move(*r);
      Reply x;
      x.producer = std::make_unique<PdJob>(this, q.body);
      return x;
    });
  }
  if (opt_.role == PdRole::kDecode) {
    server.route("POST", "/v1/pd/reserve", [this, unauthorized](const Request& q) {
      if (auto r = unauthorized(q)) return std::move(*r);
      return Reply::of(reserve(q));
    });
    server.route("POST", "/v1/kv_push", [this, unauthorized](const Request& q) {
      if (auto r = unauthorized(q)) return std::move(*r);
      return Reply::of(receive(q));
    });
  }
}

void PdRoutes::unbuffer_locked(Room& room) {
  buffered_ -= room.buffered;
  room.buffered = 0;
}

void PdRoutes::expire_rooms_locked(Clock::time_point now) {
  for (auto it = rooms_.begin(); it != rooms_.end();) {
    if (it->second.deadline <= now && it->second.state != RoomState::kReceiving) {
      unbuffer_locked(it->second);
      if (it->second.hold != 0 && opt_.reserver) opt_.reserver->release_kv(it->second.hold);
      it = rooms_.erase(it);
    } else {
      ++it;
    }
  }
}

Response PdRoutes::reserve(const Request& req) {
  auto b = parse_prompt_body(req.body, engine_.vocab_size());
  if (!b.is_ok()) return bad_request(b.status().message());
  int64_t max_tokens = 256;  // GenerationRequest's default
  if (const Value* m = b->json.find("max_tokens")) {
    if (!m->int_fits_int64(&max_tokens) || max_tokens < 1)
      return bad_request("'max_tokens' must be a positive integer");
  }
  Room room;
  room.chain = resumable_chain(b->prompt, opt_.block_tokens, b->cache_salt);
  const auto now = Clock::now();
  room.deadline = now + std::chrono::milliseconds(int64_t(opt_.lease_s * 1000));
  const size_t expect = room.chain.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    expire_rooms_locked(now);
    if (rooms_.size() >= kMaxRooms)
      return error(503, "too many hand-offs under way", "server_error", "too_many_rooms");
    if (rooms_.count(b->room) != 0)
      return error(409, "room '" + b->room + "' is already open", "invalid_request_error",
                   "room_exists");
    // Decode first: the request's KV pages are held before P is asked to prefill.
    if (opt_.reserver != nullptr) {
      auto hold = opt_.reserver->reserve_kv(b->prompt, kv::tenant_salt(b->cache_salt), max_tokens,
                                            room.deadline);
      if (!hold.is_ok()) {
        ++n_.refused_reservations;
        return error(503, hold.status().message(), "server_error", "kv_capacity");
      }
      room.hold = *hold;
    }
    rooms_.emplace(b->room, std::move(room));
    ++n_.rooms;
  }
  return Response::json(
      200, "{\"room\":\"" + b->room + "\",\"expect_blocks\":" + std::to_string(expect) + "}");
}

Response PdRoutes::receive(const Request& req) {
  const std::string name = query_value(req.target, "room");
  std::unique_ptr<kv::PushAssembler> push;
  std::vector<uint64_t> chain;
  Clock::time_point until;
  {
    std::lock_guard<std::mutex> lock(mu_);
    expire_rooms_locked(Clock::now());
    auto it = rooms_.find(name);
    if (it == rooms_.end())
      return error(404, "no open room '" + name + "' (expired, or never reserved)",
                   "invalid_request_error", "unknown_room");
    Room& room = it->second;
    if (room.state == RoomState::kReceiving)
      return error(409, "room '" + name + "' is taking another chunk", "invalid_request_error",
                   "room_busy");
    if (room.state == RoomState::kComplete || room.state == RoomState::kFailed)
      return error(409, "room '" + name + "' already has its push", "invalid_request_error",
                   "room_used");
    if (buffered_ + int64_t(req.body.size()) > opt_.stage->budget_bytes()) {
      unbuffer_locked(room);
      room.push.reset();
      room.state = RoomState::kFailed;
      room.why = "the staging tier cannot hold more of the pushes under way";
      ++n_.rejected_chunks;
      ++n_.received_pushes;
      ++n_.rejected_pushes;
      cv_.notify_all();
      return error(503, room.why, "server_error", "stage_full");
    }
    if (!room.push) {
      kv::PushExpectation expect;
      expect.model = opt_.model;
      expect.block_tokens = uint32_t(opt_.block_tokens);
      expect.chain = room.chain;
      expect.max_stream_bytes = uint64_t(opt_.stage->budget_bytes());
      room.push = std::make_unique<kv::PushAssembler>(std::move(expect));
    }
    room.state = RoomState::kReceiving;
    push = std::move(room.push);
    chain = room.chain;
    until = room.deadline;
  }
  // The chunk's checks, and the objects it completes, outside the lock.
  kv::PushFailure why;
  auto added = push->add_chunk(req.body, &why);
  std::string failure;
  kv::VerifiedPush v;
  if (!added.is_ok()) {
    failure = added.status().message();
  } else if (*added) {
    v = push->take();
    for (size_t i = 0; i < v.blocks.size() && failure.empty(); ++i)
      if (!opt_.stage->install(kv::store_key(opt_.model, chain[i], kv::ObjectKind::kBlock),
                               std::move(v.blocks[i]), until))
        failure = "the staging tier is full";
    if (failure.empty() && v.window_block > 0 &&
        !opt_.stage->install(
            kv::store_key(opt_.model, chain[v.window_block - 1], kv::ObjectKind::kWindow),
            std::move(v.window), until))
      failure = "the staging tier is full";
  }
  const bool complete = failure.empty() && *added;
  const uint32_t chunk = push->chunks_received(), chunks = push->chunk_count();
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = rooms_.find(name);
    if (it != rooms_.end()) {
      Room& room = it->second;
      if (failure.empty()) room.chunk_bytes += int64_t(req.body.size());
      bytes = room.chunk_bytes;
      room.state = !failure.empty() ? RoomState::kFailed
                   : complete       ? RoomState::kComplete
                                    : RoomState::kPartial;
      room.why = failure;
      if (room.state == RoomState::kPartial) {
        room.push = std::move(push);
        room.buffered += int64_t(req.body.size());
        buffered_ += int64_t(req.body.size());
      } else {
        unbuffer_locked(room);
      }
    }
    if (failure.empty()) {
      ++n_.received_chunks;
    } else {
      ++n_.rejected_chunks;
    }
    if (complete || !failure.empty()) ++n_.received_pushes;
    if (complete) {
      n_.received_blocks += int64_t(v.blocks.size());
      n_.received_windows += v.window_block > 0 ? 1 : 0;
      n_.received_bytes += bytes;
    } else if (!failure.empty()) {
      ++n_.rejected_pushes;
    }
  }
  cv_.notify_all();
  if (!failure.empty()) {
    log_warn("pd: push into room " + name + " rejected: " + failure);
    return error(422, failure, "kv_push_error",
                 why.fault == kv::PushFault::kObject
                     ? std::string("object_") + kv::block_fault_name(why.block)
                     : std::string(kv::push_fault_name(why.fault)));
  }
  if (!complete)
    return Response::json(200, "{\"room\":\"" + name + "\",\"chunk\":" + std::to_string(chunk - 1) +
                                   ",\"chunks\":" + std::to_string(chunks) +
                                   ",\"complete\":false}");
  return Response::json(200, "{\"room\":\"" + name +
                                 "\",\"blocks\":" + std::to_string(v.blocks.size()) +
                                 ",\"window_block\":" + std::to_string(v.window_block) +
                                 ",\"chunks\":" + std::to_string(chunks) +
                                 ",\"bytes\":" + std::to_string(bytes) + ",\"complete\":true}");
}

Status PdRoutes::admit_room(std::string_view room) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  std::string why;
  if (it == rooms_.end()) {
    why = "no open room '" + std::string(room) + "' (expired, or never reserved)";
  } else {
    const auto deadline = it->second.deadline;
    cv_.wait_until(lock, deadline, [&] {
      it = rooms_.find(room);
      return it == rooms_.end() || it->second.state != RoomState::kReceiving;
    });
    if (it != rooms_.end() && it->second.state == RoomState::kComplete) {
      unbuffer_locked(it->second);
      rooms_.erase(it);
      return Status::ok();
    }
    // The router sends the request after P answered, so a push still partial now will not
    // be finished (P gave up or died between chunks).
    why = it == rooms_.end()                         ? "the room was closed"
          : it->second.state == RoomState::kReserved ? "no push arrived from the prefill replica"
          : it->second.state == RoomState::kPartial
              ? "the push stopped after " +
                    std::to_string(it->second.push ? it->second.push->chunks_received() : 0) +
                    " of " + std::to_string(it->second.push ? it->second.push->chunk_count() : 0) +
                    " chunks"
          : it->second.state == RoomState::kReceiving ? "the push did not finish in time"
                                                      : "the push was rejected: " + it->second.why;
    if (it != rooms_.end() && it->second.state != RoomState::kReceiving) {
      // Recomputed here, the request still takes its hold at admission; failed, it never comes.
      if (!opt_.recompute_on_failure && it->second.hold != 0 && opt_.reserver)
        opt_.reserver->release_kv(it->second.hold);
      unbuffer_locked(it->second);
      rooms_.erase(it);
    }
  }
  ++n_.transfer_failures;
  if (opt_.recompute_on_failure) ++n_.recomputed;
  lock.unlock();
  log_warn("pd: KV transfer for room " + std::string(room) + " failed (" + why + "); " +
           (opt_.recompute_on_failure ? "prefilling here" : "failing the request"));
  if (opt_.recompute_on_failure) return Status::ok();
  return Status(StatusCode::kResourceExhausted, "KV transfer failed: " + why);
}

Response PdRoutes::prefill(const std::string& body, const std::atomic<bool>& cancelled) {
  auto b = parse_prompt_body(body, engine_.vocab_size());
  if (!b.is_ok()) return bad_request(b.status().message());
  const Value* to = b->json.find("push_to");
  if (to == nullptr || !to->is_string()) return bad_request("'push_to' must be a URL");
  auto ep = router::parse_endpoint(to->text);
  if (!ep.is_ok()) return bad_request("'push_to': " + ep.status().message());
  kv::RetentionClass cls = kv::kDefaultRetention;
  if (const Value* r = b->json.find("retention")) {
    std::optional<kv::RetentionClass> c;
    if (r->is_string()) c = opt_.retention.find(r->text);
    if (!c) return bad_request("'retention' must name one of " + opt_.retention.names());
    cls = *c;
  }
  const std::vector<uint64_t> chain = resumable_chain(b->prompt, opt_.block_tokens, b->cache_salt);
  // Lease what the prefill is about to write (or already holds) until the push is done.
  std::vector<kv::StoreKey> blocks_keys, window_keys, leased;
  for (uint64_t h : chain) {
    blocks_keys.push_back(kv::store_key(opt_.model, h, kv::ObjectKind::kBlock));
    window_keys.push_back(kv::store_key(opt_.model, h, kv::ObjectKind::kWindow));
  }
  leased = blocks_keys;
  leased.insert(leased.end(), window_keys.begin(), window_keys.end());
  opt_.stage->lease(leased, Clock::now() + std::chrono::milliseconds(int64_t(opt_.lease_s * 1000)));
  struct Release {
    kv::MemoryStore* stage;
    const std::vector<kv::StoreKey>& keys;
    ~Release() { stage->release(keys); }
  } release{opt_.stage, leased};
  auto count_failure = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_.prefill_failures;
  };

  const auto t0 = Clock::now();
  engine::GenerationRequest g;
  g.prompt = b->prompt;
  g.max_tokens = 1;
  g.sampling.temperature = 0;
  g.cache_salt = kv::tenant_salt(b->cache_salt);
  g.retention = cls;
  auto streams = engine_.submit_n(std::move(g), 1);
  if (!streams.is_ok()) {
    count_failure();
    const bool full = streams.status().code() == StatusCode::kResourceExhausted;
    return error(full ? 503 : 400, streams.status().message(),
                 full ? "server_error" : "invalid_request_error", "prefill_failed");
  }
  engine::RequestStream& stream = *streams->front();
  engine::StreamEvent ev;
  int64_t cached = 0;
  for (;;) {
    if (cancelled.load()) stream.cancel();
    if (!stream.next(&ev, 100)) continue;
    cached = std::max(cached, ev.cached_tokens);
    if (ev.finished) break;
  }
  if (ev.cause == engine::FinishCause::kError || ev.cause == engine::FinishCause::kCancelled) {
    count_failure();
    return error(500, "the prefill failed: " + ev.error.message(), "server_error",
                 "prefill_failed");
  }
  const double prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  // The chain the store holds from block 1, and the deepest of its blocks with a window.
  std::vector<std::string> objects;
  std::vector<Result<std::string>> read = opt_.store->get_many(blocks_keys, cls);
  for (Result<std::string>& r : read) {
    if (!r.is_ok()) break;
    objects.push_back(std::move(*r));
  }
  std::string window;
  size_t w = objects.size();
  for (; w > 0; --w) {
    Result<std::string> r = opt_.store->get(window_keys[w - 1], cls);
    if (r.is_ok()) {
      window = std::move(*r);
      break;
    }
  }
  objects.resize(w);  // blocks past the deepest window are of no use to a resume
  if (opt_.test_corrupt_push && !objects.empty())
    objects.front()[kv::kObjectHeaderBytes + 8] ^= 0x01;
  if (opt_.test_push_delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(opt_.test_push_delay_ms));
  const std::vector<std::string> chunks =
      kv::encode_chunks(kv::encode_push(objects, window), opt_.push_chunk_bytes);
  const auto t1 = Clock::now();
  router::PdCallOptions co;
  co.auth_header = opt_.push_auth_header;
  co.timeout_ms = opt_.push_timeout_ms;
  Result<std::string> pushed = std::string();
  int64_t push_bytes = 0;
  for (size_t i = 0; i < chunks.size() && pushed.is_ok(); ++i) {
    if (i > 0 && opt_.test_chunk_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(opt_.test_chunk_delay_ms));
    if (cancelled.load()) {
      pushed = io_error("the router left during the push");
      break;
    }
    pushed = router::pd_push(*ep, b->room, chunks[i], co);
    push_bytes += int64_t(chunks[i].size());
  }
  const double push_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_.prefills;
    ++n_.pushes;
    if (pushed.is_ok()) {
      n_.pushed_blocks += int64_t(w);
      n_.pushed_bytes += push_bytes;
      n_.pushed_chunks += int64_t(chunks.size());
      n_.push_seconds += push_seconds;
    } else {
      ++n_.push_failures;
    }
  }
  if (!pushed.is_ok())
    return error(502, "the push to " + ep->url + " failed: " + pushed.status().message(),
                 "server_error", "kv_push_failed");
  char secs[96];
  std::snprintf(secs, sizeof secs, ",\"prefill_seconds\":%.6f,\"push_seconds\":%.6f",
                prefill_seconds, push_seconds);
  return Response::json(200, "{\"room\":\"" + b->room + "\",\"blocks\":" + std::to_string(w) +
                                 ",\"window_block\":" + std::to_string(w) +
                                 ",\"bytes\":" + std::to_string(push_bytes) +
                                 ",\"chunks\":" + std::to_string(chunks.size()) +
                                 ",\"cached_tokens\":" + std::to_string(cached) + secs + "}");
}

std::string PdRoutes::metrics_text() const {
  Counters c;
  size_t open_rooms = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = n_;
    const auto now = Clock::now();
    for (const auto& [name, room] : rooms_)
      if (room.deadline > now || room.state == RoomState::kReceiving) ++open_rooms;
  }
  std::ostringstream o;
  auto counter = [&](const char* name, const char* help, auto v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
      << name << " " << v << "\n";
  };
  o << "# HELP fathom_pd_role This replica's P/D role\n# TYPE fathom_pd_role gauge\n"
    << "fathom_pd_role{role=\"" << pd_role_name(opt_.role) << "\"} 1\n";
  if (opt_.role == PdRole::kPrefill) {
    counter("fathom_pd_prefills_total", "Hand-off prefills run and pushed (or tried)", c.prefills);
    counter("fathom_pd_prefill_failures_total", "Hand-off prefills that failed before the push",
            c.prefill_failures);
    counter("fathom_pd_push_failures_total", "Pushes the decode replica refused or never got",
            c.push_failures);
    counter("fathom_pd_pushed_blocks_total", "Block objects pushed and accepted", c.pushed_blocks);
    counter("fathom_pd_pushed_bytes_total", "Push bytes (frames and chunks included) accepted",
            c.pushed_bytes);
    counter("fathom_pd_pushed_chunks_total", "Chunks of accepted pushes", c.pushed_chunks);
    counter("fathom_pd_push_seconds_total", "Seconds spent pushing (accepted pushes)",
            c.push_seconds);
    o << "# HELP fathom_pd_leased_objects Staged objects under a lease now\n"
         "# TYPE fathom_pd_leased_objects gauge\nfathom_pd_leased_objects "
      << (opt_.stage ? opt_.stage->leased() : 0) << "\n";
  }
  if (opt_.role == PdRole::kDecode) {
    counter("fathom_pd_rooms_total", "Hand-off rooms reserved", c.rooms);
    counter("fathom_pd_refused_reservations_total",
            "Reservations refused for want of KV pages (503 kv_capacity)", c.refused_reservations);
    o << "# HELP fathom_pd_reserved_kv_pages KV pages held now for hand-offs not yet admitted\n"
         "# TYPE fathom_pd_reserved_kv_pages gauge\nfathom_pd_reserved_kv_pages "
      << (opt_.reserver ? opt_.reserver->reserved_kv_pages() : 0) << "\n";
    counter("fathom_pd_received_pushes_total", "Pushes received (accepted or not)",
            c.received_pushes);
    counter("fathom_pd_rejected_pushes_total", "Pushes that failed their checks",
            c.rejected_pushes);
    counter("fathom_pd_received_blocks_total", "Block objects received and installed",
            c.received_blocks);
    counter("fathom_pd_received_windows_total", "Window side objects received and installed",
            c.received_windows);
    counter("fathom_pd_received_bytes_total",
            "Bytes of accepted pushes (frames and chunks included)", c.received_bytes);
    counter("fathom_pd_received_chunks_total", "Push chunks that passed their checks",
            c.received_chunks);
    counter("fathom_pd_rejected_chunks_total", "Push chunks that failed their checks",
            c.rejected_chunks);
    o << "# HELP fathom_pd_open_rooms Hand-off rooms open now (reserved, receiving or "
         "waiting for their request)\n# TYPE fathom_pd_open_rooms gauge\nfathom_pd_open_rooms "
      << open_rooms << "\n";
    counter("fathom_pd_transfer_failures_total", "Requests whose KV transfer failed or never came",
            c.transfer_failures);
    counter("fathom_pd_recomputed_total",
            "Of those, requests prefilled here instead (--kv-load-failure recompute)",
            c.recomputed);
  }
  return o.str();
}

}  // namespace fathom::serve
