#include "router/remote_generator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <thread>

#include "core/py_json.h"
#include "kv/kv_event_wire.h"
#include "router/pd_client.h"

namespace fathom::router {
namespace {

using Clock = std::chrono::steady_clock;
using pyjson::Value;

Status resource_exhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}

// The message of an error body — {"error": {"message"}} (OpenAI, vLLM, SGLang, Fathom),
// {"object": "error", "message"} (older vLLM), {"detail": ...} (FastAPI's 422) — else the
// body itself (shortened).
std::string error_message(const std::string& body) {
  auto v = pyjson::parse(body);
  if (v.is_ok() && v->is_object()) {
    if (const Value* e = v->find("error"); e && e->is_object())
      if (const Value* m = e->find("message"); m && m->is_string()) return m->text;
    if (const Value* m = v->find("message"); m && m->is_string()) return m->text;
    if (const Value* d = v->find("detail"))
      return d->is_string() ? d->text : pyjson::dumps(*d, false, true).substr(0, 400);
  }
  return body.substr(0, 200);
}

}  // namespace

struct RemoteGenerator::Job {
  engine::GenerationRequest req;
  int n = 1;
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  std::vector<std::vector<int32_t>> generated;  // per choice, every token received
  std::vector<engine::FinishCause> cause;       // per choice; kNone until it finished
  std::vector<char> closed;                     // per choice: its final event was pushed
  // Per choice: a received token that may end it (EOS, a stop id), not pushed yet, so that it
  // reaches the client in the final event as the engine sends it there (SGLang's /generate
  // reports the matched stop token from that event).
  std::vector<engine::StreamEvent> held;
  Clock::time_point t0;
  bool first_token = false;
  int64_t cached = 0;
  std::string last_error;
  std::vector<size_t> tried;  // replicas that failed this request

  bool all_cancelled() const {
    for (size_t i = 0; i < streams.size(); ++i)
      if (!closed[i] && !streams[i]->cancelled()) return false;
    return true;
  }
  bool all_finished() const {
    for (size_t i = 0; i < streams.size(); ++i)
      if (!closed[i] && cause[i] == engine::FinishCause::kNone) return false;
    return true;
  }
  bool any_tokens() const {
    for (const auto& g : generated)
      if (!g.empty()) return true;
    return false;
  }
  engine::StreamEvent event(size_t i) const {
    engine::StreamEvent ev;
    ev.prompt_tokens = int64_t(req.prompt.size());
    ev.cached_tokens = std::min<int64_t>(cached, ev.prompt_tokens);
    ev.completion_tokens = int64_t(generated[i].size());
    return ev;
  }
  // The final event of every choice not closed yet: its finish, or `cause` with `error`.
  void close_all(engine::FinishCause fallback, const Status& error) {
    for (size_t i = 0; i < streams.size(); ++i) {
      if (closed[i]) continue;
      engine::StreamEvent ev = event(i);
      ev.tokens = std::move(held[i].tokens);
      ev.logprobs = std::move(held[i].logprobs);
      if (!first_token && !ev.tokens.empty()) {
        first_token = true;
        ev.first_token_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      }
      ev.finished = true;
      if (streams[i]->cancelled()) {
        ev.cause = engine::FinishCause::kCancelled;
      } else if (cause[i] != engine::FinishCause::kNone) {
        ev.cause = cause[i];
      } else {
        ev.cause = fallback;
        ev.error = error;
      }
      streams[i]->push(ev);
      closed[i] = 1;
    }
  }
};

namespace {

// A token after which the engine may end the request: EOS or one of its stop ids.
bool may_end(const engine::GenerationRequest& r, int32_t eos, int32_t t) {
  return t == eos || std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end();
}

// The engine's cause for a choice the upstream finished with "stop" (kEos) after `generated`
// (engine/output_processor.cc, stop_cause): EOS unless ignored, else a stop id's kStopToken.
engine::FinishCause finish_cause(const engine::GenerationRequest& r, int32_t eos,
                                 std::span<const int32_t> generated, engine::FinishCause c) {
  if (c != engine::FinishCause::kEos || generated.empty()) return c;
  const int32_t t = generated.back();
  if (t == eos && !r.ignore_eos) return c;
  if (std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end())
    return engine::FinishCause::kStopToken;
  return c;
}

}  // namespace

Result<std::unique_ptr<RemoteGenerator>> RemoteGenerator::create(
    const std::vector<std::string>& replicas, RemoteGeneratorOptions options) {
  if (replicas.empty()) return invalid_argument("the router needs at least one --replica");
  std::vector<Endpoint> eps;
  for (const std::string& u : replicas) {
    FATHOM_ASSIGN_OR_RETURN(Endpoint e, parse_endpoint(u));
    for (const Endpoint& have : eps)
      if (have.url == e.url) return invalid_argument("replica " + e.url + " is given twice");
    eps.push_back(std::move(e));
  }
  return std::unique_ptr<RemoteGenerator>(new RemoteGenerator(std::move(eps), std::move(options)));
}

RemoteGenerator::RemoteGenerator(std::vector<Endpoint> endpoints, RemoteGeneratorOptions options)
    : opt_(std::move(options)), policy_(endpoints.size(), opt_.routing) {
  if (!opt_.api_key.empty() && opt_.probes.auth_header.empty())
    opt_.probes.auth_header = "Authorization: Bearer " + opt_.api_key + "\r\n";
  replicas_ = std::make_unique<ReplicaSet>(std::move(endpoints), opt_.probes);
  id_base_ = std::random_device{}();
  id_base_ = id_base_ << 32 ^ std::random_device{}();
  kv_.resize(replicas_->size());
  if (opt_.follow_kv_events && opt_.routing.policy == Policy::kCacheAware &&
      opt_.upstream == UpstreamKind::kFathom) {
    if (opt_.kv_follower.auth_header.empty())
      opt_.kv_follower.auth_header = opt_.probes.auth_header;
    for (size_t i = 0; i < replicas_->size(); ++i)
      followers_.push_back(std::make_unique<KvEventFollower>(
          i, *replicas_, static_cast<KvFeedTarget&>(*this), opt_.kv_follower));
  }
}

RemoteGenerator::~RemoteGenerator() {
  followers_.clear();
  stopping_.store(true);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return active_ == 0; });
}

engine::Generator::Health RemoteGenerator::health() const {
  Health h;
  h.alive = replicas_->any_up();
  return h;
}

RouterStats RemoteGenerator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Result<std::vector<std::shared_ptr<engine::RequestStream>>> RemoteGenerator::submit_n(
    engine::GenerationRequest request, int n) {
  if (n < 1 || n > 128) return invalid_argument("'n' must be in [1, 128]");
  if (request.prompt.empty()) return invalid_argument("'prompt' is empty");
  if (!request.forced_output.empty() || request.inject_error_after >= 0)
    return unsupported(
        "test hooks (forced_output_ids, fathom_inject_error_after) are not supported through "
        "fathom router");
  // What the replica's engine would refuse, refused before anything is sent (as it words it).
  if (request.top_logprobs < -1 || request.top_logprobs > engine::kMaxTopLogprobs)
    return invalid_argument("top_logprobs must be between 0 and 20");
  if (request.think_end_id < -1 || (opt_.vocab_size > 0 && request.think_end_id >= opt_.vocab_size))
    return invalid_argument("think_end_id outside the vocabulary");
  FATHOM_RETURN_IF_ERROR(check_upstream_supports(opt_.upstream, request, n));
  if (stopping_.load()) return resource_exhausted("the router is shutting down");
  if (!replicas_->any_up()) return resource_exhausted("no replica is up");
  auto job = std::make_shared<Job>();
  job->req = std::move(request);
  job->n = n;
  job->t0 = Clock::now();
  job->generated.resize(size_t(n));
  job->cause.assign(size_t(n), engine::FinishCause::kNone);
  job->closed.assign(size_t(n), 0);
  job->held.resize(size_t(n));
  for (int i = 0; i < n; ++i) job->streams.push_back(std::make_shared<engine::RequestStream>());
  std::vector<std::shared_ptr<engine::RequestStream>> out = job->streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++active_;
    ++stats_.requests;
  }
  std::thread([this, job] {
    run(*job);
    std::lock_guard<std::mutex> lock(mu_);
    if (--active_ == 0) done_cv_.notify_all();
  }).detach();
  return out;
}

void RemoteGenerator::run(Job& job) {
  for (int a = 0; a < opt_.max_attempts; ++a) {
    if (stopping_.load() || job.all_cancelled()) break;
    const std::vector<ReplicaState> states = replicas_->snapshot();
    auto open = [&](size_t i) {
      return states[i].up && std::find(job.tried.begin(), job.tried.end(), i) == job.tried.end();
    };
    // Prefill replicas take requests only when no other replica can.
    bool others = false;
    for (size_t i = 0; i < states.size(); ++i) others |= open(i) && states[i].role != "prefill";
    std::vector<Candidate> cands;
    for (size_t i = 0; i < states.size(); ++i)
      if (open(i) && (!others || states[i].role != "prefill"))
        cands.push_back({i, states[i].in_flight});
    if (cands.empty()) {
      if (job.last_error.empty()) job.last_error = "no replica is up";
      break;
    }
    const std::span<const int32_t> prompt(job.req.prompt);
    Choice c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      c = policy_.pick(prompt, job.req.cache_salt, cands);
      policy_.routed(c.replica, c.block_hashes);
      ++stats_.attempts;
      if (a > 0) ++stats_.retries;
      if (a > 0 && job.any_tokens()) ++stats_.continuations;
      if (a == 0) {
        stats_.prompt_blocks += c.prompt_blocks;
        stats_.predicted_hit_blocks += c.predicted_hit_blocks;
      }
    }
    const std::string room = a == 0 ? handoff(job, c, states) : std::string();
    replicas_->begin(c.replica);
    const bool done = attempt(job, c.replica, room);
    replicas_->end(c.replica, !done);
    if (done) break;
    job.tried.push_back(c.replica);
    if (job.n > 1 && job.any_tokens()) {
      job.last_error += "; a request of n > 1 samples is not continued on another replica";
      break;
    }
  }
  if (stopping_.load() || job.all_cancelled()) {
    job.close_all(engine::FinishCause::kCancelled, Status::ok());
    return;
  }
  const bool failed = !job.all_finished();
  job.close_all(engine::FinishCause::kError,
                resource_exhausted("no replica could complete the request: " + job.last_error));
  if (failed) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.failed;
  }
}

std::string RemoteGenerator::handoff(Job& job, const Choice& d,
                                     const std::vector<ReplicaState>& states) {
  if (opt_.upstream != UpstreamKind::kFathom || states[d.replica].role != "decode") return "";
  std::vector<Candidate> prefill;
  for (size_t i = 0; i < states.size(); ++i)
    if (states[i].up && states[i].role == "prefill") prefill.push_back({i, states[i].in_flight});
  if (prefill.empty()) return "";
  const std::span<const int32_t> prompt(job.req.prompt);
  const int64_t L = int64_t(prompt.size());
  const int64_t on_d = L - d.predicted_hit_blocks * opt_.routing.block_tokens;
  if (L < opt_.pd_min_prompt_tokens || on_d < opt_.pd_min_prompt_tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.pd_local;
    return "";
  }
  Choice p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    p = policy_.pick(prompt, job.req.cache_salt, prefill);
    policy_.routed(p.replica, p.block_hashes);
    ++stats_.pd_disaggregated;
  }
  char room[64];
  std::snprintf(room, sizeof room, "pd-%016llx-%llu", (unsigned long long)id_base_,
                (unsigned long long)attempt_ids_.fetch_add(1));
  const std::string salt = job.req.cache_salt ? upstream_salt_name(job.req.cache_salt) : "";
  PdCallOptions o;
  if (!opt_.api_key.empty()) o.auth_header = "Authorization: Bearer " + opt_.api_key + "\r\n";
  o.connect_timeout_ms = opt_.connect_timeout_ms;
  o.timeout_ms = opt_.pd_timeout_ms;
  const Endpoint& de = replicas_->endpoint(d.replica);
  const auto t0 = Clock::now();
  auto reserved = pd_reserve(de, room, prompt, salt, o, job.req.max_tokens);  // D holds the pages
  if (!reserved.is_ok()) {
    // D has no room for it (or cannot be reached: the attempt finds out): prefilled on D.
    std::lock_guard<std::mutex> lock(mu_);
    --stats_.pd_disaggregated;
    ++stats_.pd_local;
    return "";
  }
  replicas_->begin(p.replica);
  auto r = pd_prefill(replicas_->endpoint(p.replica), room, prompt, salt,
                      opt_.retention.name(job.req.retention), de.url, o);
  // P failed (unreachable, or cut off mid-way) when the exchange itself broke; an error it
  // answered is the transfer's failure, not P's.
  replicas_->end(p.replica, !r.is_ok() && r.status().code() == StatusCode::kIoError);
  std::lock_guard<std::mutex> lock(mu_);
  if (r.is_ok()) {
    stats_.pd_bytes += r->bytes;
    stats_.pd_blocks += r->blocks;
    stats_.pd_transfer_seconds.observe(r->push_seconds);
    stats_.pd_handoff_seconds.observe(std::chrono::duration<double>(Clock::now() - t0).count());
  } else {
    ++stats_.pd_failed;
    std::fprintf(stderr, "fathom router: P/D hand-off %s failed: %s\n", room,
                 r.status().message().c_str());
  }
  return room;  // a failed transfer too: D follows its --kv-load-failure
}

bool RemoteGenerator::attempt(Job& job, size_t replica, const std::string& room) {
  const Endpoint& ep = replicas_->endpoint(replica);
  const bool cont = job.n == 1 && !job.generated.front().empty();
  if (cont && int64_t(job.generated.front().size()) >= job.req.max_tokens) {
    job.cause.front() = engine::FinishCause::kLength;
    return true;
  }
  // The failed replica sent a token that ended the request, but not the finish: it ended.
  if (cont) {
    const int32_t last = job.generated.front().back();
    const std::vector<int32_t>& stops = job.req.stop_ids;
    if (last == opt_.eos_id && !job.req.ignore_eos) {
      job.cause.front() = engine::FinishCause::kEos;
      return true;
    }
    if (std::find(stops.begin(), stops.end(), last) != stops.end()) {
      job.cause.front() = engine::FinishCause::kStopToken;
      return true;
    }
  }
  const std::span<const int32_t> sofar =
      cont ? std::span<const int32_t>(job.generated.front()) : std::span<const int32_t>();
  char rid[64];
  std::snprintf(rid, sizeof rid, "fathom-router-%016llx-%llu", (unsigned long long)id_base_,
                (unsigned long long)attempt_ids_.fetch_add(1));
  const UpstreamCall call = build_upstream_call(opt_.upstream, job.req, job.n, sofar,
                                                opt_.retention.name(job.req.retention), rid);
  // What the upstream computes as the prompt: on vllm and sglang the output so far is on it.
  std::vector<int32_t> sent = job.req.prompt;
  if (opt_.upstream != UpstreamKind::kFathom) sent.insert(sent.end(), sofar.begin(), sofar.end());
  std::string auth = opt_.api_key.empty() ? "" : "Authorization: Bearer " + opt_.api_key + "\r\n";
  if (!room.empty()) auth += std::string(kKvRoomHeader) + ": " + room + "\r\n";
  auto x = HttpExchange::start(ep, "POST", call.path, call.body, auth, opt_.connect_timeout_ms,
                               opt_.head_timeout_ms);
  if (!x.is_ok()) {
    job.last_error = x.status().message();
    return false;
  }
  HttpExchange& ex = **x;
  if (ex.status() != 200) {
    auto body = ex.read_all(opt_.connect_timeout_ms);
    const std::string msg = body.is_ok() ? error_message(*body) : body.status().message();
    const int st = ex.status();
    if (!room.empty() && st == 503 && body.is_ok() &&
        body->find(kKvTransferFailedCode) != std::string::npos) {
      // D runs --kv-load-failure fail: the request ends with the transfer's error; D is fine.
      job.close_all(engine::FinishCause::kError, resource_exhausted(msg));
      return true;
    }
    // 404/405: not a replica of this kind at that path (a misconfigured --replica or
    // --upstream-kind): its fault.
    if (st >= 400 && st < 500 && st != 404 && st != 405 && st != 408 && st != 429) {
      // The request's own fault (the replica validated it): no other replica would take it.
      job.close_all(engine::FinishCause::kError, invalid_argument(msg));
      return true;
    }
    job.last_error = ep.url + " answered " + std::to_string(st) + ": " + msg;
    return false;
  }
  auto stop = [this, &job] { return stopping_.load() || job.all_cancelled(); };
  UpstreamStreamReader reader(opt_.upstream, job.n, opt_.vocab_size, sent, job.req.top_logprobs);
  std::vector<UpstreamStreamReader::Update> updates;
  std::string line;
  int64_t reported = 0;  // cached tokens this attempt reported so far
  for (;;) {
    auto more = ex.read_line(&line, opt_.idle_timeout_ms, stop);
    if (!more.is_ok() || !*more) {
      if (stop()) return true;
      // A body that ends once every choice finished is complete, [DONE] or not.
      if (job.all_finished()) {
        job.close_all(engine::FinishCause::kEos, Status::ok());
        return true;
      }
      job.last_error =
          ep.url + ": " +
          (more.is_ok() ? std::string("the stream ended before [DONE]") : more.status().message());
      return false;
    }
    updates.clear();
    const Status fed = reader.feed(line, &updates);
    if (const std::optional<int64_t> c = reader.cached_tokens(); c && *c != reported) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.reported_cached_tokens += *c - reported;
      reported = job.cached = *c;
    }
    if (!fed.is_ok()) {
      job.last_error = ep.url + ": " + fed.message();
      return false;
    }
    for (UpstreamStreamReader::Update& up : updates) {
      const size_t i = up.choice;
      job.generated[i].insert(job.generated[i].end(), up.tokens.begin(), up.tokens.end());
      if (up.cause != engine::FinishCause::kNone)
        job.cause[i] = finish_cause(job.req, opt_.eos_id, job.generated[i], up.cause);
      if (job.closed[i] || job.streams[i]->cancelled()) continue;
      engine::StreamEvent ev = job.event(i);
      // A token held back from the previous update goes first.
      engine::StreamEvent& held = job.held[i];
      ev.tokens = std::move(held.tokens);
      ev.logprobs = std::move(held.logprobs);
      held.tokens.clear();
      held.logprobs.clear();
      ev.tokens.insert(ev.tokens.end(), up.tokens.begin(), up.tokens.end());
      ev.logprobs.insert(ev.logprobs.end(), up.logprobs.begin(), up.logprobs.end());
      // The token that ended the choice goes out with its finish (close_all, at the end of
      // the answer: the usage, cached tokens included, comes after the finish chunk).
      if (!ev.tokens.empty() && may_end(job.req, opt_.eos_id, ev.tokens.back())) {
        held.tokens.push_back(ev.tokens.back());
        ev.tokens.pop_back();
        if (ev.logprobs.size() > ev.tokens.size()) {
          held.logprobs.push_back(ev.logprobs.back());
          ev.logprobs.pop_back();
        }
      }
      if (ev.tokens.empty()) continue;
      ev.completion_tokens = int64_t(job.generated[i].size() - held.tokens.size());
      if (!job.first_token && !ev.tokens.empty()) {
        job.first_token = true;
        ev.first_token_seconds = std::chrono::duration<double>(Clock::now() - job.t0).count();
      }
      job.streams[i]->push(ev);
    }
    if (reader.done()) {
      if (!job.all_finished()) {
        job.last_error = ep.url + ": [DONE] before every choice finished";
        return false;
      }
      job.close_all(engine::FinishCause::kEos, Status::ok());
      return true;
    }
  }
}

void RemoteGenerator::kv_snapshot(size_t replica, const kv::KvSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_.load_snapshot(replica, snapshot);
  KvFeedStats& k = kv_[replica];
  k.event_fed = true;
  ++k.snapshot_loads;
  k.last_event_id = snapshot.last_id;
}

void RemoteGenerator::kv_event(size_t replica, const kv::KvEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_.apply_event(replica, event);
  ++kv_[replica].events_applied;
  kv_[replica].last_event_id = event.id;
}

void RemoteGenerator::kv_lost(size_t replica, bool resync) {
  std::lock_guard<std::mutex> lock(mu_);
  if (resync) {
    ++kv_[replica].resyncs;  // the view stays until the snapshot replaces it
    return;
  }
  policy_.drop(replica);
  ++kv_[replica].lost;
}

void RemoteGenerator::kv_unsupported(size_t replica) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_.set_predicted(replica);
  kv_[replica].event_fed = false;
}

std::vector<KvFeedStats> RemoteGenerator::kv_feed_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KvFeedStats> out = kv_;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].event_fed = policy_.event_fed(i);
    out[i].index_blocks = policy_.indexed_blocks(i);
  }
  return out;
}

std::string RemoteGenerator::kv_index_json(std::string_view query) const {
  size_t only = SIZE_MAX;
  if (query.substr(0, 8) == "replica=") {
    only = 0;
    for (char ch : query.substr(8)) {
      if (ch < '0' || ch > '9') break;
      only = only * 10 + size_t(ch - '0');
    }
  }
  std::string out = "{\"replicas\":[";
  std::lock_guard<std::mutex> lock(mu_);
  bool first = true;
  for (size_t i = 0; i < replicas_->size(); ++i) {
    if (only != SIZE_MAX && i != only) continue;
    std::vector<uint64_t> blocks;
    if (policy_.event_fed(i)) blocks = policy_.exact_index().hashes_of(i);
    std::sort(blocks.begin(), blocks.end());
    if (!first) out += ',';
    first = false;
    out += "{\"replica\":" + std::to_string(i) + ",\"url\":\"" + replicas_->endpoint(i).url +
           "\",\"source\":\"" + (policy_.event_fed(i) ? "events" : "predicted") +
           "\",\"last_event_id\":" + std::to_string(kv_[i].last_event_id) +
           ",\"index_blocks\":" + std::to_string(policy_.indexed_blocks(i)) + ",\"blocks\":[";
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (b > 0) out += ',';
      out += '"' + kv::block_hash_hex(blocks[b]) + '"';
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

std::string RemoteGenerator::metrics_text() const {
  const RouterStats s = stats();
  const std::vector<KvFeedStats> kvs = kv_feed_stats();
  const std::vector<ReplicaState> reps = replicas_->snapshot();
  std::ostringstream o;
  auto counter = [&](const char* name, const char* help, int64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
      << name << " " << v << "\n";
  };
  o << "# HELP fathom_router_decisions_total Requests routed, by policy\n# TYPE "
       "fathom_router_decisions_total counter\nfathom_router_decisions_total{policy=\""
    << policy_name(opt_.routing.policy) << "\"} " << s.requests << "\n";
  counter("fathom_router_attempts_total", "Requests sent to a replica (first tries and retries)",
          s.attempts);
  counter("fathom_router_retries_total", "Requests sent again after a replica failed", s.retries);
  counter("fathom_router_continuations_total",
          "Retries that continued a request from the tokens already streamed", s.continuations);
  counter("fathom_router_failed_requests_total", "Requests no replica could complete", s.failed);
  counter("fathom_router_prompt_blocks_total", "Full 128-token prompt blocks routed",
          s.prompt_blocks);
  counter("fathom_router_predicted_hit_blocks_total",
          "Prompt blocks the cache-aware index expected the chosen replica to hold",
          s.predicted_hit_blocks);
  counter("fathom_router_reported_cached_tokens_total",
          "Prompt tokens the replicas reported as served from their cache",
          s.reported_cached_tokens);
  o << "# HELP fathom_router_pd_requests_total Requests the P/D hand-off applied to: "
       "disaggregated (prefilled on a prefill replica) or local (short or cached, prefilled on "
       "the decode replica)\n# TYPE fathom_router_pd_requests_total counter\n"
    << "fathom_router_pd_requests_total{mode=\"disaggregated\"} " << s.pd_disaggregated << "\n"
    << "fathom_router_pd_requests_total{mode=\"local\"} " << s.pd_local << "\n";
  counter("fathom_router_pd_transfer_failures_total",
          "Hand-offs whose prefill or push failed (the decode replica recomputes or fails)",
          s.pd_failed);
  counter("fathom_router_pd_transfer_bytes_total", "KV bytes pushed from P to D (frames included)",
          s.pd_bytes);
  counter("fathom_router_pd_transfer_blocks_total", "Block objects pushed from P to D",
          s.pd_blocks);
  auto histogram = [&](const char* name, const char* help, const PdHistogram& h) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    int64_t cum = 0;
    for (size_t b = 0; b < PdHistogram::kBounds.size(); ++b) {
      cum += h.counts[b];
      o << name << "_bucket{le=\"" << PdHistogram::kBounds[b] << "\"} " << cum << "\n";
    }
    o << name << "_bucket{le=\"+Inf\"} " << h.count << "\n"
      << name << "_sum " << h.sum << "\n"
      << name << "_count " << h.count << "\n";
  };
  histogram("fathom_router_pd_transfer_seconds",
            "Seconds P took to push a hand-off's KV blocks to D", s.pd_transfer_seconds);
  histogram("fathom_router_pd_handoff_seconds",
            "Seconds of a whole hand-off: D's reservation, P's prefill and push",
            s.pd_handoff_seconds);
  auto per = [&](const char* name, const char* help, const char* type, auto field) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (const ReplicaState& r : reps)
      o << name << "{replica=\"" << r.url << "\"} " << field(r) << "\n";
  };
  per("fathom_router_replica_up", "1 when the replica is up (healthy and not failing)", "gauge",
      [](const ReplicaState& r) { return r.up ? 1 : 0; });
  o << "# HELP fathom_router_replica_role The replica's P/D role as its /health reports it\n"
       "# TYPE fathom_router_replica_role gauge\n";
  for (const ReplicaState& r : reps)
    o << "fathom_router_replica_role{replica=\"" << r.url << "\",role=\"" << r.role << "\"} 1\n";
  per("fathom_router_replica_in_flight", "Requests streaming from the replica", "gauge",
      [](const ReplicaState& r) { return r.in_flight; });
  per("fathom_router_replica_routed_total", "Attempts sent to the replica", "counter",
      [](const ReplicaState& r) { return r.routed; });
  per("fathom_router_replica_failures_total", "Attempts that failed on the replica", "counter",
      [](const ReplicaState& r) { return r.failures; });
  auto per_kv = [&](const char* name, const char* help, const char* type, auto field) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (size_t i = 0; i < reps.size() && i < kvs.size(); ++i)
      o << name << "{replica=\"" << reps[i].url << "\"} " << field(kvs[i]) << "\n";
  };
  per_kv("fathom_router_kv_event_fed",
         "1 when the replica's cache-aware view follows its KV events (exact), 0 when predicted",
         "gauge", [](const KvFeedStats& k) { return k.event_fed ? 1 : 0; });
  per_kv("fathom_router_kv_events_applied_total", "KV events of the replica applied to the index",
         "counter", [](const KvFeedStats& k) { return k.events_applied; });
  per_kv("fathom_router_kv_resyncs_total",
         "Times the replica's feed could not continue (gap, resync, restart) and was reloaded",
         "counter", [](const KvFeedStats& k) { return k.resyncs; });
  per_kv("fathom_router_kv_snapshot_loads_total", "Snapshots of the replica's cache loaded",
         "counter", [](const KvFeedStats& k) { return k.snapshot_loads; });
  per_kv("fathom_router_kv_last_event_id", "The replica's last KV event applied", "gauge",
         [](const KvFeedStats& k) { return k.last_event_id; });
  per_kv("fathom_router_index_blocks", "Blocks the cache-aware view of the replica holds", "gauge",
         [](const KvFeedStats& k) { return k.index_blocks; });
  return o.str();
}

}  // namespace fathom::router
