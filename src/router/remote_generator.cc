#include "router/remote_generator.h"

// clang-format off
#include "router/async_http_client.h"  // first: Asio's headers, <utility> fixed before them
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
// clang-format on

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <sstream>
#include <thread>

#include "core/py_json.h"
#include "engine/output_processor.h"
#include "kv/kv_event_wire.h"
#include "router/pd_client.h"

namespace fathom::router {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using pyjson::Value;
template <typename T>
using Awaitable = AsyncHttpExchange::Awaitable<T>;

Status resource_exhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
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
  int choice_loops = 0;       // n > 1 continued: the choices' coroutines still running

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
  // The final event of choice i unless it is closed: its finish, or `fallback` with `error`.
  void close(size_t i, engine::FinishCause fallback, const Status& error) {
    if (closed[i]) return;
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
  void close_all(engine::FinishCause fallback, const Status& error) {
    for (size_t i = 0; i < streams.size(); ++i) close(i, fallback, error);
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

// An attempt in flight on a replica (ReplicaSet::begin), ended (ReplicaSet::end) when it goes
// out of scope: as failed unless ok() was called, so an exception cannot leave it counted.
class InFlight {
 public:
  InFlight(ReplicaSet& set, size_t replica) : set_(set), replica_(replica) { set_.begin(replica_); }
  ~InFlight() { set_.end(replica_, failed_); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  void ok() { failed_ = false; }

 private:
  ReplicaSet& set_;
  size_t replica_;
  bool failed_ = true;
};

// The replicas a request may be sent to now: up and not failed for it; prefill replicas only
// when no other replica can take it.
std::vector<Candidate> candidates(const std::vector<ReplicaState>& states,
                                  const std::vector<size_t>& tried) {
  auto open = [&](size_t i) {
    return states[i].up && std::find(tried.begin(), tried.end(), i) == tried.end();
  };
  bool others = false;
  for (size_t i = 0; i < states.size(); ++i) others |= open(i) && states[i].role != "prefill";
  std::vector<Candidate> cands;
  for (size_t i = 0; i < states.size(); ++i)
    if (open(i) && (!others || states[i].role != "prefill"))
      cands.push_back({i, states[i].in_flight});
  return cands;
}

}  // namespace

// The io_context the requests' coroutines run on, and its threads.
struct RemoteGenerator::Loop {
  explicit Loop(int n_threads) : work(asio::make_work_guard(io)) {
    for (int i = 0; i < std::max(1, n_threads); ++i) threads.emplace_back([this] { io.run(); });
  }
  // REQUIRES: no request is running (their coroutines ended).
  ~Loop() {
    work.reset();
    for (std::thread& t : threads) t.join();
  }
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::vector<std::thread> threads;
};

// The coroutines of one request, all on the request's strand (so a Job is touched by one
// thread at a time and needs no lock; the generator's shared state keeps its own).
struct RemoteGenerator::Driver {
  // The request from its first attempt to its final events.
  static Awaitable<void> run(RemoteGenerator& g, std::shared_ptr<Job> job);
  // Attempts on replicas until one completes the request (or none is left).
  static Awaitable<void> attempts(RemoteGenerator& g, std::shared_ptr<Job> job);
  // n > 1 after tokens: each unfinished choice continues on its own, concurrently.
  static Awaitable<void> continue_choices(RemoteGenerator& g, std::shared_ptr<Job> job,
                                          int first_attempt);
  static Awaitable<void> continue_choice(RemoteGenerator& g, std::shared_ptr<Job> job,
                                         size_t choice, int first_attempt,
                                         std::shared_ptr<asio::steady_timer> all_done);
  struct Handoff {
    std::string room;      // the room D holds the pushed blocks in ("": prefill on D)
    bool refused = false;  // D has no room for the request: try another replica
  };
  // P/D: disaggregates the request when `d` decodes hand-offs and it is worth it (see the
  // header).
  static Awaitable<Handoff> handoff(RemoteGenerator& g, Job& job, const Choice& d,
                                    const std::vector<ReplicaState>& states);
  // The prompt blocks RoutingPolicy::hold() counted as a replica's for one attempt, released
  // once: at release() (the replica sent its first token: its prefill is done), or when
  // destroyed, however the attempt ends. Neither happens while g.mu_ is held.
  class HeldBlocks {
   public:
    HeldBlocks() = default;
    HeldBlocks(RemoteGenerator* g, size_t replica, std::vector<uint64_t> hashes)
        : g_(g), replica_(replica), hashes_(std::move(hashes)) {}
    HeldBlocks(HeldBlocks&& o) noexcept
        : g_(std::exchange(o.g_, nullptr)), replica_(o.replica_), hashes_(std::move(o.hashes_)) {}
    HeldBlocks& operator=(HeldBlocks&& o) noexcept {
      if (this != &o) {
        release();
        g_ = std::exchange(o.g_, nullptr);
        replica_ = o.replica_;
        hashes_ = std::move(o.hashes_);
      }
      return *this;
    }
    ~HeldBlocks() { release(); }
    void release() {
      if (g_ == nullptr) return;
      std::lock_guard<std::mutex> lock(g_->mu_);
      g_->policy_.release(replica_, hashes_);
      g_ = nullptr;
    }

   private:
    RemoteGenerator* g_ = nullptr;
    size_t replica_ = 0;
    std::vector<uint64_t> hashes_;
  };
  // A choice, and its prompt blocks held on its replica.
  struct Picked {
    Choice c;
    HeldBlocks held;
  };
  // One attempt on `replica` for every choice (choice < 0), or for one choice continued on
  // its own: true when it ended there (finished or failed for good); false when the replica
  // failed and the request (or the choice) should go elsewhere. `prefill_blocks` is released
  // at the first token.
  static Awaitable<bool> attempt(RemoteGenerator& g, Job& job, size_t replica,
                                 const std::string& room, int choice, HeldBlocks* prefill_blocks);
  // The policy's choice among `cands` for the request, its blocks held there in the same
  // critical section (so requests picked at once see each other's).
  static Picked pick(RemoteGenerator& g, const Job& job, std::span<const Candidate> cands);
  // c's blocks held on its replica (a choice made earlier, taken again).
  static HeldBlocks hold(RemoteGenerator& g, const Choice& c);
  // hold() with g.mu_ held.
  static HeldBlocks hold_locked(RemoteGenerator& g, const Choice& c);
  // Attempt number `a` on c (see attempt()), counted: routed, in flight on the replica while
  // it runs, and on its failure added to the replicas the request passes over.
  static Awaitable<bool> try_on(RemoteGenerator& g, Job& job, const Choice& c, int a,
                                const std::string& room, int choice, HeldBlocks held);
  // Routing bookkeeping for attempt number `a` on c.
  static void routed(RemoteGenerator& g, const Job& job, const Choice& c, int a);
  // The request's final events and counts, once no coroutine of it runs.
  static void finish(RemoteGenerator& g, Job& job);
};

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
  loop_ = std::make_unique<Loop>(opt_.io_threads);
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
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return active_ == 0; });
  }
  loop_.reset();
}

int64_t RemoteGenerator::context_length() const {
  const int64_t replicas = replicas_->max_model_len();
  return replicas > 0 ? std::min(opt_.context_length, replicas) : opt_.context_length;
}

bool RemoteGenerator::hung(size_t i) const {
  return opt_.abandon_down_after_s > 0 &&
         replicas_->probe_failing_seconds(i) > opt_.abandon_down_after_s;
}

std::string RemoteGenerator::hung_reason(size_t i) const {
  char why[128];
  std::snprintf(why, sizeof why, ": its health probes have failed for over %.1f s",
                opt_.abandon_down_after_s);
  return replicas_->endpoint(i).url + why;
}

engine::Generator::Health RemoteGenerator::health() const {
  Health h;
  h.alive = replicas_->any_up();
  return h;
}

RouterStats RemoteGenerator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RouterStats s = stats_;
  s.index_dropped_blocks = policy_.exact_index().dropped();
  return s;
}

Result<std::vector<std::shared_ptr<engine::RequestStream>>> RemoteGenerator::submit_n(
    engine::GenerationRequest request, int n) {
  if (n < 1 || n > 128) return invalid_argument("'n' must be in [1, 128]");
  if (request.prompt.empty()) return invalid_argument("'prompt' is empty");
  if (!request.forced_output.empty() || request.inject_error_after >= 0)
    return unsupported(
        "test hooks (forced_output_ids, fathom_inject_error_after) are not supported through "
        "fathom router");
  // The router continues requests with resume_output_ids itself (failover); a client's own
  // would be dropped, so it is refused, naming it.
  if (!request.resume_output.empty())
    return invalid_argument(
        "'resume_output_ids' is not supported through fathom router: send it to a replica");
  // What the replica's engine would refuse, refused before anything is sent (as it words it).
  if (request.top_logprobs < -1 || request.top_logprobs > engine::kMaxTopLogprobs)
    return invalid_argument("top_logprobs must be between 0 and 20");
  if (request.think_end_id < -1 || (opt_.vocab_size > 0 && request.think_end_id >= opt_.vocab_size))
    return invalid_argument("think_end_id outside the vocabulary");
  FATHOM_RETURN_IF_ERROR(engine::OutputProcessor::prepare_logit_controls(
      &request, opt_.vocab_size > 0 ? opt_.vocab_size : int64_t(1) << 31));
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
  asio::co_spawn(asio::make_strand(loop_->io), Driver::run(*this, std::move(job)),
                 [this](std::exception_ptr) {
                   // run() catches what its attempts throw; nothing reaches here.
                   std::lock_guard<std::mutex> lock(mu_);
                   if (--active_ == 0) done_cv_.notify_all();
                 });
  return out;
}

Awaitable<void> RemoteGenerator::Driver::run(RemoteGenerator& g, std::shared_ptr<Job> job) {
  try {
    co_await attempts(g, job);
  } catch (const std::exception& e) {
    job->last_error = std::string("internal error: ") + e.what();
  } catch (...) {
    job->last_error = "internal error";
  }
  finish(g, *job);
}

void RemoteGenerator::Driver::finish(RemoteGenerator& g, Job& job) {
  if (g.stopping_.load() || job.all_cancelled()) {
    job.close_all(engine::FinishCause::kCancelled, Status::ok());
    return;
  }
  const bool failed = !job.all_finished();
  job.close_all(engine::FinishCause::kError,
                resource_exhausted("no replica could complete the request: " + job.last_error));
  if (failed) {
    std::lock_guard<std::mutex> lock(g.mu_);
    ++g.stats_.failed;
  }
}

void RemoteGenerator::Driver::routed(RemoteGenerator& g, const Job& job, const Choice& c, int a) {
  std::lock_guard<std::mutex> lock(g.mu_);
  g.policy_.routed(c.replica, c.block_hashes);
  ++g.stats_.attempts;
  if (a > 0) ++g.stats_.retries;
  if (a > 0 && job.any_tokens()) ++g.stats_.continuations;
  if (a == 0) {
    g.stats_.prompt_blocks += c.prompt_blocks;
    g.stats_.predicted_hit_blocks += c.predicted_hit_blocks;
  }
}

RemoteGenerator::Driver::Picked RemoteGenerator::Driver::pick(RemoteGenerator& g, const Job& job,
                                                              std::span<const Candidate> cands) {
  Picked out;
  std::lock_guard<std::mutex> lock(g.mu_);
  out.c = g.policy_.pick(job.req.prompt, job.req.cache_salt, cands);
  out.held = hold_locked(g, out.c);
  return out;
}

RemoteGenerator::Driver::HeldBlocks RemoteGenerator::Driver::hold(RemoteGenerator& g,
                                                                  const Choice& c) {
  std::lock_guard<std::mutex> lock(g.mu_);
  return hold_locked(g, c);
}

RemoteGenerator::Driver::HeldBlocks RemoteGenerator::Driver::hold_locked(RemoteGenerator& g,
                                                                         const Choice& c) {
  if (!g.policy_.hold(c.replica, c.block_hashes)) return {};
  return HeldBlocks(&g, c.replica, c.block_hashes);
}

Awaitable<bool> RemoteGenerator::Driver::try_on(RemoteGenerator& g, Job& job, const Choice& c,
                                                int a, const std::string& room, int choice,
                                                HeldBlocks held) {
  routed(g, job, c, a);
  {
    InFlight flight(*g.replicas_, c.replica);
    if (co_await attempt(g, job, c.replica, room, choice, &held)) {
      flight.ok();
      co_return true;
    }
  }
  job.tried.push_back(c.replica);  // every choice of the request passes it over
  co_return false;
}

Awaitable<void> RemoteGenerator::Driver::attempts(RemoteGenerator& g, std::shared_ptr<Job> job) {
  for (int a = 0; a < g.opt_.max_attempts; ++a) {
    if (g.stopping_.load() || job->all_cancelled()) co_return;
    const std::vector<ReplicaState> states = g.replicas_->snapshot();
    std::vector<Candidate> cands = candidates(states, job->tried);
    if (cands.empty()) {
      if (job->last_error.empty()) job->last_error = "no replica is up";
      co_return;
    }
    Picked pk = pick(g, *job, cands);
    std::string room;
    if (a == 0) {
      // A decode replica without room for the request is passed over for the next-best
      // replica; when every one refuses, the first prefills the request itself.
      const Choice first = pk.c;
      for (;;) {
        Handoff h = co_await handoff(g, *job, pk.c, states);
        if (!h.refused) {
          room = std::move(h.room);
          break;
        }
        std::erase_if(cands, [&](const Candidate& x) { return x.replica == pk.c.replica; });
        if (cands.empty()) {
          pk.held.release();
          pk.c = first;
          pk.held = hold(g, first);
          std::lock_guard<std::mutex> lock(g.mu_);
          ++g.stats_.pd_local;
          break;
        }
        pk.held.release();
        pk = pick(g, *job, cands);
      }
      // The client left during the hand-off: no request for D to prefill or decode for no one
      // (its room ends with its lease).
      if (g.stopping_.load() || job->all_cancelled()) co_return;
    }
    if (co_await try_on(g, *job, pk.c, a, room, -1, std::move(pk.held))) co_return;
    if (job->n > 1 && job->any_tokens()) {
      co_await continue_choices(g, job, a + 1);
      co_return;
    }
  }
}

Awaitable<void> RemoteGenerator::Driver::continue_choices(RemoteGenerator& g,
                                                          std::shared_ptr<Job> job,
                                                          int first_attempt) {
  auto all_done = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                       asio::steady_timer::time_point::max());
  const auto ex = co_await asio::this_coro::executor;
  for (size_t i = 0; i < job->streams.size(); ++i) {
    if (job->closed[i] || job->cause[i] != engine::FinishCause::kNone) continue;
    ++job->choice_loops;
    asio::co_spawn(ex, continue_choice(g, job, i, first_attempt, all_done),
                   [](std::exception_ptr) {});
  }
  // The choices start only once this coroutine yields the strand (co_spawn posts them), so
  // the wait below is armed before the last one can cancel it.
  if (job->choice_loops > 0) {
    boost::system::error_code ec;  // operation_aborted: the last choice ended
    co_await all_done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

Awaitable<void> RemoteGenerator::Driver::continue_choice(
    RemoteGenerator& g, std::shared_ptr<Job> job, size_t choice, int first_attempt,
    std::shared_ptr<asio::steady_timer> all_done) {
  try {
    for (int a = first_attempt; a < g.opt_.max_attempts; ++a) {
      if (g.stopping_.load() || job->streams[choice]->cancelled()) break;
      const std::vector<Candidate> cands = candidates(g.replicas_->snapshot(), job->tried);
      if (cands.empty()) {
        if (job->last_error.empty()) job->last_error = "no replica is up";
        break;
      }
      Picked pk = pick(g, *job, cands);
      if (co_await try_on(g, *job, pk.c, a, "", int(choice), std::move(pk.held))) break;
    }
  } catch (const std::exception& e) {
    job->last_error = std::string("internal error: ") + e.what();
  } catch (...) {
    job->last_error = "internal error";
  }
  if (--job->choice_loops == 0) all_done->cancel();
}

Awaitable<RemoteGenerator::Driver::Handoff> RemoteGenerator::Driver::handoff(
    RemoteGenerator& g, Job& job, const Choice& d, const std::vector<ReplicaState>& states) {
  const RemoteGeneratorOptions& opt = g.opt_;
  if (opt.upstream != UpstreamKind::kFathom || states[d.replica].role != "decode")
    co_return Handoff{};
  std::vector<Candidate> prefill;
  for (size_t i = 0; i < states.size(); ++i)
    if (states[i].up && states[i].role == "prefill") prefill.push_back({i, states[i].in_flight});
  if (prefill.empty()) co_return Handoff{};
  const std::span<const int32_t> prompt(job.req.prompt);
  const int64_t L = int64_t(prompt.size());
  const int64_t on_d = L - d.predicted_hit_blocks * opt.routing.block_tokens;
  if (L < opt.pd_min_prompt_tokens || on_d < opt.pd_min_prompt_tokens) {
    std::lock_guard<std::mutex> lock(g.mu_);
    ++g.stats_.pd_local;
    co_return Handoff{};
  }
  char room_id[64];
  std::snprintf(room_id, sizeof room_id, "pd-%016llx-%llu", (unsigned long long)g.id_base_,
                (unsigned long long)g.attempt_ids_.fetch_add(1));
  const std::string room = room_id;
  const std::string salt = job.req.cache_salt ? upstream_salt_name(job.req.cache_salt) : "";
  PdCallOptions o;
  if (!opt.api_key.empty()) o.auth_header = "Authorization: Bearer " + opt.api_key + "\r\n";
  o.connect_timeout_ms = opt.connect_timeout_ms;
  o.timeout_ms = opt.pd_timeout_ms;
  auto left = [&g, &job] { return g.stopping_.load() || job.all_cancelled(); };
  // A call on a hung replica is abandoned, as an attempt on it would be (pd_timeout_ms is for
  // slow work).
  const Endpoint& de = g.replicas_->endpoint(d.replica);
  const auto t0 = Clock::now();
  // D holds the pages from here on, or has no room for the request.
  auto reserved = co_await pd_reserve(de, room, prompt, salt, o, job.req.max_tokens,
                                      [&] { return left() || g.hung(d.replica); });
  if (!reserved.is_ok()) {
    if (reserved.status().code() == StatusCode::kResourceExhausted) {
      std::lock_guard<std::mutex> lock(g.mu_);
      ++g.stats_.pd_refused;
      co_return Handoff{"", true};
    }
    // D cannot be reached: the attempt finds out (and the request moves on).
    co_return Handoff{};
  }
  // P's blocks count as its own until its prefill ends (with the hand-off).
  const Picked pp = pick(g, job, prefill);
  const Choice& p = pp.c;
  {
    std::lock_guard<std::mutex> lock(g.mu_);
    g.policy_.routed(p.replica, p.block_hashes);
    ++g.stats_.pd_disaggregated;
  }
  Result<PdPrefillResult> r = internal_error("no prefill");
  bool client_left = false;
  {
    InFlight flight(*g.replicas_, p.replica);
    r = co_await pd_prefill(g.replicas_->endpoint(p.replica), room, prompt, salt,
                            opt.retention.name(job.req.retention), de.url, o,
                            [&] { return left() || g.hung(p.replica); });
    // P failed (unreachable, cut off mid-way, or hung) when the exchange itself broke; an error
    // it answered is the transfer's failure, not P's. A client that left is no one's failure.
    client_left = left();
    if (!r.is_ok() && !client_left && g.hung(p.replica)) r = io_error(g.hung_reason(p.replica));
    if (r.is_ok() || r.status().code() != StatusCode::kIoError || client_left) flight.ok();
  }
  std::lock_guard<std::mutex> lock(g.mu_);
  if (!r.is_ok() && client_left) {
    // Not a transfer's failure: the request ends here (attempts() sees the client gone).
  } else if (r.is_ok()) {
    g.stats_.pd_bytes += r->bytes;
    g.stats_.pd_blocks += r->blocks;
    g.stats_.pd_transfer_seconds.observe(r->push_seconds);
    g.stats_.pd_handoff_seconds.observe(std::chrono::duration<double>(Clock::now() - t0).count());
  } else {
    ++g.stats_.pd_failed;
    std::fprintf(stderr, "fathom router: P/D hand-off %s failed: %s\n", room.c_str(),
                 r.status().message().c_str());
  }
  co_return Handoff{room, false};  // a failed transfer too: D follows its --kv-load-failure
}

Awaitable<bool> RemoteGenerator::Driver::attempt(RemoteGenerator& g, Job& job, size_t replica,
                                                 const std::string& room, int choice,
                                                 HeldBlocks* prefill_blocks) {
  const RemoteGeneratorOptions& opt = g.opt_;
  const Endpoint& ep = g.replicas_->endpoint(replica);
  // One choice continued on its own (n > 1 after a failure), or every choice of the request.
  const bool one = choice >= 0 && job.n > 1;
  const size_t ci = one ? size_t(choice) : 0;
  auto close = [&](engine::FinishCause fallback, const Status& error) {
    if (one)
      job.close(ci, fallback, error);
    else
      job.close_all(fallback, error);
  };
  auto finished = [&] {
    return one ? job.cause[ci] != engine::FinishCause::kNone : job.all_finished();
  };
  std::vector<int32_t>& so_far = job.generated[ci];
  const bool cont = (one || job.n == 1) && !so_far.empty();
  if (cont && int64_t(so_far.size()) >= job.req.max_tokens) {
    job.cause[ci] = engine::FinishCause::kLength;
    co_return true;
  }
  // The failed replica sent a token that ended the request, but not the finish: it ended.
  if (cont) {
    const int32_t last = so_far.back();
    const std::vector<int32_t>& stops = job.req.stop_ids;
    if (last == opt.eos_id && !job.req.ignore_eos) {
      job.cause[ci] = engine::FinishCause::kEos;
      co_return true;
    }
    if (std::find(stops.begin(), stops.end(), last) != stops.end()) {
      job.cause[ci] = engine::FinishCause::kStopToken;
      co_return true;
    }
  }
  const std::span<const int32_t> sofar =
      cont ? std::span<const int32_t>(so_far) : std::span<const int32_t>();
  char rid[64];
  std::snprintf(rid, sizeof rid, "fathom-router-%016llx-%llu", (unsigned long long)g.id_base_,
                (unsigned long long)g.attempt_ids_.fetch_add(1));
  // One choice alone: fathom continues it with its sample_index, so a seeded choice goes on
  // as in the n-sample run (upstream.h).
  const UpstreamCall call =
      build_upstream_call(opt.upstream, job.req, job.n, sofar,
                          opt.retention.name(job.req.retention), rid, one ? choice : -1);
  // What the upstream computes as the prompt: on vllm and sglang the output so far is on it.
  std::vector<int32_t> sent = job.req.prompt;
  if (opt.upstream != UpstreamKind::kFathom) sent.insert(sent.end(), sofar.begin(), sofar.end());
  std::string auth = opt.api_key.empty() ? "" : "Authorization: Bearer " + opt.api_key + "\r\n";
  if (!room.empty()) auth += std::string(kKvRoomHeader) + ": " + room + "\r\n";
  // Who the request is from, for the replica's fair share of grammar compiles (address
  // characters only: the server built it with TrustedProxies::forward()).
  if (!job.req.forwarded_for.empty()) auth += "X-Forwarded-For: " + job.req.forwarded_for + "\r\n";
  // Stops the exchange when the router stops, the client left, or the replica has been down
  // (its health probes failing) for abandon_down_after_s: then the attempt fails and another
  // replica continues (`abandoned`).
  bool abandoned = false;
  auto stop = [&g, &job, one, ci, replica, &abandoned] {
    if (g.stopping_.load() || (one ? job.streams[ci]->cancelled() : job.all_cancelled()))
      return true;
    abandoned = g.hung(replica);
    return abandoned;
  };
  auto give_up = [&] { job.last_error = g.hung_reason(replica); };
  auto x = co_await AsyncHttpExchange::start(ep, "POST", call.path, call.body, auth,
                                             opt.connect_timeout_ms, opt.head_timeout_ms, stop);
  if (!x.is_ok()) {
    if (stop() && !abandoned) co_return true;
    if (abandoned)
      give_up();
    else
      job.last_error = x.status().message();
    co_return false;
  }
  AsyncHttpExchange& ex = **x;
  if (ex.status() != 200) {
    auto body = co_await ex.read_all(opt.connect_timeout_ms, size_t(1) << 20, stop);
    const std::string msg = body.is_ok() ? error_body_message(*body) : body.status().message();
    const int st = ex.status();
    if (!room.empty() && st == 503 && body.is_ok() &&
        body->find(kKvTransferFailedCode) != std::string::npos) {
      // D runs --kv-load-failure fail: the request ends with the transfer's error; D is fine.
      close(engine::FinishCause::kError, resource_exhausted(msg));
      co_return true;
    }
    // 404/405: not a replica of this kind at that path (a misconfigured --replica or
    // --upstream-kind): its fault.
    if (st >= 400 && st < 500 && st != 404 && st != 405 && st != 408 && st != 429) {
      // The request's own fault (the replica validated it): no other replica would take it.
      close(engine::FinishCause::kError, invalid_argument(msg));
      co_return true;
    }
    job.last_error = ep.url + " answered " + std::to_string(st) + ": " + msg;
    co_return false;
  }
  UpstreamStreamReader reader(opt.upstream, one ? 1 : job.n, opt.vocab_size, sent,
                              job.req.top_logprobs);
  std::vector<UpstreamStreamReader::Update> updates;
  std::string line;
  int64_t reported = 0;  // cached tokens this attempt reported so far
  for (;;) {
    auto more = co_await ex.read_line(&line, opt.idle_timeout_ms, stop);
    if (!more.is_ok() || !*more) {
      if (stop() && !abandoned) co_return true;
      // Abandoned after every choice finished: the answer is complete (below), not failed.
      if (abandoned && !finished()) {
        give_up();
        co_return false;
      }
      // A body that ends once every choice finished is complete, [DONE] or not.
      if (finished()) {
        close(engine::FinishCause::kEos, Status::ok());
        co_return true;
      }
      job.last_error =
          ep.url + ": " +
          (more.is_ok() ? std::string("the stream ended before [DONE]") : more.status().message());
      co_return false;
    }
    updates.clear();
    const Status fed = reader.feed(line, &updates);
    if (const std::optional<int64_t> c = reader.cached_tokens(); c && *c != reported) {
      std::lock_guard<std::mutex> lock(g.mu_);
      g.stats_.reported_cached_tokens += *c - reported;
      reported = job.cached = *c;
    }
    if (!fed.is_ok() && fed.code() == StatusCode::kInvalidArgument) {
      // The replica failed the request mid-stream for its own parameters (its logits
      // controls left no token to sample, ...): the client gets that error, as from the
      // replica itself; no other replica would do better, and this one is fine.
      close(engine::FinishCause::kError, invalid_argument(fed.message()));
      co_return true;
    }
    if (!fed.is_ok()) {
      job.last_error = ep.url + ": " + fed.message();
      co_return false;
    }
    // Tokens: the replica's prefill is done, and its events carry the blocks it cached.
    if (prefill_blocks != nullptr && !updates.empty()) prefill_blocks->release();
    for (UpstreamStreamReader::Update& up : updates) {
      const size_t i = one ? ci : up.choice;
      // More tokens than max_tokens is an answer outside the protocol: the attempt fails
      // before any of them reaches the client (another replica continues from what came).
      if (int64_t(job.generated[i].size() + up.tokens.size()) > job.req.max_tokens) {
        job.last_error = ep.url + ": answered more tokens than max_tokens (" +
                         std::to_string(job.req.max_tokens) + ")";
        co_return false;
      }
      job.generated[i].insert(job.generated[i].end(), up.tokens.begin(), up.tokens.end());
      if (up.cause != engine::FinishCause::kNone)
        job.cause[i] = finish_cause(job.req, opt.eos_id, job.generated[i], up.cause);
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
      // The token that ended the choice goes out with its finish (close(), at the end of
      // the answer: the usage, cached tokens included, comes after the finish chunk).
      if (!ev.tokens.empty() && may_end(job.req, opt.eos_id, ev.tokens.back())) {
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
      if (!finished()) {
        job.last_error = ep.url + ": [DONE] before every choice finished";
        co_return false;
      }
      close(engine::FinishCause::kEos, Status::ok());
      co_return true;
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

Result<std::string> RemoteGenerator::kv_index_json(std::string_view query) const {
  // No query: every replica; "replica=I": replica I alone (an index the router has).
  size_t only = SIZE_MAX;
  if (!query.empty()) {
    const std::string_view v = query.substr(0, 8) == "replica=" ? query.substr(8) : "";
    size_t i = 0;
    bool ok = !v.empty() && v.size() <= 6;
    for (char ch : v) {
      ok = ok && ch >= '0' && ch <= '9';
      if (ok) i = i * 10 + size_t(ch - '0');
    }
    if (!ok || query.substr(0, 8) != "replica=" || i >= replicas_->size())
      return invalid_argument("'replica' must be a replica's index, 0.." +
                              std::to_string(replicas_->size() - 1) + " (the only query)");
    only = i;
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
           ",\"index_blocks\":" + std::to_string(policy_.indexed_blocks(i)) +
           ",\"in_flight_blocks\":" + std::to_string(policy_.in_flight_blocks(i)) + ",\"blocks\":[";
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
  counter("fathom_router_index_dropped_blocks_total",
          "KV events' block stores the cache-aware index dropped: the replica's view was at its "
          "bound of blocks",
          s.index_dropped_blocks);
  o << "# HELP fathom_router_pd_requests_total Requests the P/D hand-off applied to: "
       "disaggregated (prefilled on a prefill replica) or local (short or cached, prefilled on "
       "the decode replica)\n# TYPE fathom_router_pd_requests_total counter\n"
    << "fathom_router_pd_requests_total{mode=\"disaggregated\"} " << s.pd_disaggregated << "\n"
    << "fathom_router_pd_requests_total{mode=\"local\"} " << s.pd_local << "\n";
  counter("fathom_router_pd_refused_reservations_total",
          "Reservations a decode replica refused for lack of KV room (the request went to the "
          "next-best replica)",
          s.pd_refused);
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
