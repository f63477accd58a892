#include "serve/server.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>

#include "api/anthropic_messages.h"
#include "api/chat_completions.h"
#include "api/errors.h"
#include "api/openai_responses.h"
#include "api/stop_matcher.h"
#include "core/json_write.h"
#include "core/py_json.h"
#include "core/utf8.h"
#include "engine/engine.h"
#include "prompt/encoder.h"
#include "prompt/output_parser.h"
#include "serve/http_server.h"
#include "tokenizer/tokenizer.h"

namespace fathom::serve {
namespace {

using Clock = std::chrono::steady_clock;
using http::Reply;
using http::Request;
using http::Response;
using pyjson::Value;

enum class Protocol { kChat, kMessages, kResponses, kCompletions };

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::kChat:
      return "chat_completions";
    case Protocol::kMessages:
      return "messages";
    case Protocol::kResponses:
      return "responses";
    case Protocol::kCompletions:
      return "completions";
  }
  return "?";
}

std::string quote(std::string_view s) {
  std::string out;
  json::append_string(out, s);
  return out;
}

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, (unsigned long long)rng());
  return buf;
}

// Metrics, updated from the HTTP threads.
struct Metrics {
  std::mutex mu;
  int64_t requests[4] = {}, errors[4] = {};
  double ttft_sum = 0, latency_sum = 0;
  int64_t ttft_count = 0, latency_count = 0;
};

// "forced_output_ids": [ids] of a request body (only when the server allows it).
Status forced_ids(std::string_view body, std::vector<int32_t>* out) {
  auto v = pyjson::parse(body);
  if (!v.is_ok() || !v->is_object()) return Status::ok();  // the adapter reports bad JSON
  const Value* f = v->find("forced_output_ids");
  if (f == nullptr) return Status::ok();
  if (!f->is_array()) return invalid_argument("'forced_output_ids' must be a list of token ids");
  for (const Value& e : f->items) {
    int64_t x = 0;
    if (!e.int_fits_int64(&x) || x < 0 || x > INT32_MAX)
      return invalid_argument("'forced_output_ids' must be a list of token ids");
    out->push_back(int32_t(x));
  }
  return Status::ok();
}

// The JSON body of an error the transport answers itself (unknown path, wrong method, body
// too large, ...), in the shape of the API behind the path.
std::string transport_error_json(std::string_view path, int status, const std::string& message) {
  const bool anthropic = path == "/v1/messages";
  const char* type = "invalid_request_error";
  const char* code = "invalid_request";
  switch (status) {
    case 404:
      type = anthropic ? "not_found_error" : "invalid_request_error";
      code = "not_found";
      break;
    case 405:
      code = "method_not_allowed";
      break;
    case 408:
      code = "request_timeout";
      break;
    case 413:
      type = anthropic ? "request_too_large" : "invalid_request_error";
      code = "request_too_large";
      break;
    case 431:
      code = "request_header_fields_too_large";
      break;
    case 503:
      type = anthropic ? "overloaded_error" : "server_error";
      code = "server_overloaded";
      break;
    default:
      if (status >= 500) {
        type = anthropic ? "api_error" : "server_error";
        code = "internal_error";
      }
  }
  std::string out;
  if (anthropic) {
    out = "{\"type\":\"error\",\"error\":{\"type\":" + quote(type) +
          ",\"message\":" + quote(message) + "}}";
  } else {
    out = "{\"error\":{\"message\":" + quote(message) + ",\"type\":" + quote(type) +
          ",\"param\":null,\"code\":" + quote(code) + "}}";
  }
  return out;
}

// What /health reports about the engine.
struct EngineHealth {
  bool alive = true;
  double stalled_seconds = 0;  // time with work to do and no step ending
};

}  // namespace

struct Server::Impl {
  engine::Engine& engine;
  const Tokenizer& tok;
  const prompt::PromptEncoder& encoder;
  ServerOptions opt;
  Metrics metrics;
  int32_t eos = -1;
  // The stall probe: the engine's step count when it last changed (or the engine was idle).
  std::mutex health_mu;
  int64_t health_steps = -1;
  Clock::time_point health_since = Clock::now();
  http::HttpServer http;  // last: its connections (and their producers) go first

  static http::HttpServerOptions transport_options(const ServerOptions& o) {
    http::HttpServerOptions h;
    h.host = o.host;
    h.port = o.port;
    h.max_body_bytes = o.max_body_bytes;
    h.header_timeout_s = o.header_timeout_s;
    h.body_timeout_s = o.body_timeout_s;
    h.shutdown_timeout_s = o.shutdown_timeout_s;
    h.max_connections = o.max_connections;
    h.io_threads = o.io_threads;
    h.worker_threads = o.worker_threads;
    return h;
  }

  Impl(engine::Engine& e, const Tokenizer& t, const prompt::PromptEncoder& enc, ServerOptions o)
      : engine(e), tok(t), encoder(enc), opt(std::move(o)), http(transport_options(opt)) {
    eos = tok.id_of("<｜end▁of▁sentence｜>");
  }

  // The one place that decides whether the engine is healthy. Today from engine.stats()
  // (steps not advancing while requests wait or run); Engine::health() replaces it later.
  EngineHealth engine_health() {
    const engine::EngineStats s = engine.stats();
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(health_mu);
    if (s.steps != health_steps || (s.running == 0 && s.waiting == 0)) {
      health_steps = s.steps;
      health_since = now;
    }
    EngineHealth h;
    h.stalled_seconds = std::chrono::duration<double>(now - health_since).count();
    return h;
  }

  std::string error_body(Protocol p, const Status& s) const {
    return p == Protocol::kMessages ? api::anthropic_error_json(s) : api::openai_error_json(s);
  }

  void count_error(Protocol p) {
    std::lock_guard<std::mutex> lock(metrics.mu);
    ++metrics.errors[int(p)];
  }

  Reply send_error(Protocol p, const Status& s, int http_status = 0) {
    count_error(p);
    return Reply::of(
        Response::json(http_status ? http_status : api::http_status_of(s), error_body(p, s)));
  }

  // Nothing when the request carries the API key (or none is configured); otherwise the
  // protocol's 401 (OpenAI shape unless `p` is Messages).
  std::optional<Reply> unauthorized(Protocol p, const Request& req) const {
    if (opt.api_key.empty() || req.header("Authorization") == "Bearer " + opt.api_key ||
        req.header("x-api-key") == opt.api_key)
      return std::nullopt;
    return Reply::of(Response::json(
        401,
        p == Protocol::kMessages
            ? R"({"type":"error","error":{"type":"authentication_error","message":"invalid or missing API key"}})"
            : R"({"error":{"message":"invalid or missing API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}})"));
  }

  // The start of every POST /v1/* request: counted and authorised (the transport enforces
  // the body limit).
  std::optional<Reply> admit(Protocol p, const Request& req) {
    {
      std::lock_guard<std::mutex> lock(metrics.mu);
      ++metrics.requests[int(p)];
    }
    if (auto r = unauthorized(p, req)) {
      count_error(p);
      return r;
    }
    return std::nullopt;
  }

  void finish_metrics(Clock::time_point t0, double ttft) {
    std::lock_guard<std::mutex> lock(metrics.mu);
    if (ttft > 0) {
      metrics.ttft_sum += ttft;
      ++metrics.ttft_count;
    }
    metrics.latency_sum += std::chrono::duration<double>(Clock::now() - t0).count();
    ++metrics.latency_count;
  }

  // The prompt's token count against the context length (400 when no token would fit).
  Status check_prompt(size_t n) const {
    if (int64_t(n) >= opt.context_length)
      return invalid_argument("the prompt has " + std::to_string(n) +
                              " tokens; the model's context length is " +
                              std::to_string(opt.context_length) + " (prompt and output together)");
    return Status::ok();
  }

  Reply route(Protocol p, const Request& req);
  Reply completions(const Request& req);
  std::string metrics_text();
  Response health();
};

namespace {

engine::GenerationRequest generation(const api::SamplingParams& s, std::vector<int32_t> ids,
                                     const ServerOptions& opt) {
  engine::GenerationRequest g;
  g.prompt = std::move(ids);
  g.sampling.temperature = float(s.temperature.value_or(1.0));
  g.sampling.top_p = float(s.top_p.value_or(1.0));
  g.sampling.top_k = int(s.top_k.value_or(0));
  g.sampling.presence_penalty = float(s.presence_penalty.value_or(0.0));
  g.sampling.frequency_penalty = float(s.frequency_penalty.value_or(0.0));
  g.sampling.min_p = float(s.min_p.value_or(0.0));
  g.sampling.repetition_penalty = float(s.repetition_penalty.value_or(1.0));
  if (s.seed) {
    g.sampling.seed = uint64_t(*s.seed);
    g.seeded = true;
  }
  // Default and cap: what the context leaves after the prompt.
  const int64_t room = std::max<int64_t>(1, opt.context_length - int64_t(g.prompt.size()));
  const int64_t fallback = opt.default_max_tokens > 0 ? opt.default_max_tokens : room;
  g.max_tokens = std::min(s.max_tokens.value_or(fallback), room);
  return g;
}

// Base of the generation producers: the engine stream, woken through its waker, cancelled
// when the producer goes (a client that left, a reply dropped at shutdown).
class StreamProducer : public http::Producer {
 public:
  explicit StreamProducer(std::shared_ptr<engine::RequestStream> s) : stream_(std::move(s)) {}
  ~StreamProducer() override {
    stream_->set_waker(nullptr);
    stream_->cancel();
  }
  void start(std::function<void()> wake) override { stream_->set_waker(std::move(wake)); }
  void cancel() override { stream_->cancel(); }

 protected:
  std::shared_ptr<engine::RequestStream> stream_;
};

// Chat Completions, Responses or Messages: engine tokens through the output parser into the
// protocol's responder (SSE events, or one JSON body at the end).
template <typename Responder>
class ConversationProducer : public StreamProducer {
 public:
  ConversationProducer(Server::Impl* im, std::shared_ptr<engine::RequestStream> s,
                       prompt::OutputParser parser, Responder responder, bool streaming,
                       Clock::time_point t0)
      : StreamProducer(std::move(s)),
        im_(im),
        parser_(std::move(parser)),
        responder_(std::move(responder)),
        streaming_(streaming),
        t0_(t0) {}

  bool poll(Response* out) override {
    engine::StreamEvent ev;
    while (!done_ && stream_->try_next(&ev)) {
      std::vector<prompt::ParserEvent> events;
      usage_.prompt_tokens = ev.prompt_tokens;
      usage_.cached_tokens = ev.cached_tokens;
      if (ev.first_token_seconds > 0) ttft_ = ev.first_token_seconds;
      for (int32_t t : ev.tokens) {
        usage_.completion_tokens += 1;
        if (!parser_.finished()) (void)parser_.push(t, events);
      }
      if (ev.finished && !parser_.finished()) {
        parser_.finish(ev.cause == engine::FinishCause::kLength
                           ? prompt::FinishReason::kLength
                           : prompt::FinishReason::kEndOfStream,
                       events);
      }
      if (parser_.finished()) {
        done_ = true;
        stream_->cancel();  // a stop sequence ends generation early
      }
      if (streaming_)
        out->body += responder_.stream(events, usage_);
      else
        responder_.add(events);
    }
    if (!done_) return false;
    im_->finish_metrics(t0_, ttft_);
    if (!streaming_) *out = Response::json(200, responder_.complete(usage_));
    return true;
  }

 private:
  Server::Impl* im_;
  prompt::OutputParser parser_;
  Responder responder_;
  bool streaming_;
  Clock::time_point t0_;
  api::Usage usage_;
  bool done_ = false;
  double ttft_ = -1;
};

// OpenAI (legacy) Completions: the continuation decoded as text, stop strings applied, as
// `text_completion` chunks (SSE) or one JSON body.
class CompletionProducer : public StreamProducer {
 public:
  CompletionProducer(Server::Impl* im, std::shared_ptr<engine::RequestStream> s,
                     std::vector<std::string> stops, std::string id, int64_t created,
                     bool streaming, Clock::time_point t0)
      : StreamProducer(std::move(s)),
        im_(im),
        dec_(im->tok, true),
        stop_(std::move(stops)),
        id_(std::move(id)),
        created_(created),
        streaming_(streaming),
        t0_(t0) {}

  bool poll(Response* out) override {
    engine::StreamEvent ev;
    while (!done_ && stream_->try_next(&ev)) {
      std::string piece, text;
      for (int32_t t : ev.tokens) {
        ++n_;
        if (t != im_->eos) (void)dec_.push(t, piece);
      }
      if (ev.first_token_seconds > 0) ttft_ = ev.first_token_seconds;
      if (ev.finished) dec_.finish(piece);
      if (stop_.push(piece, &text)) {
        stream_->cancel();  // the engine stops at its next step
        ev.finished = true;
        ev.cause = engine::FinishCause::kStopToken;
      } else if (ev.finished) {
        stop_.finish(&text);
      }
      if (streaming_) {
        if (!text.empty()) out->body += "data: " + choice(text, nullptr) + "}\n\n";
      } else {
        text_ += text;
      }
      if (!ev.finished) continue;
      done_ = true;
      if (streaming_) {
        out->body += "data: " + choice("", finish_name(ev.cause)) +
                     usage_json(ev.prompt_tokens, n_, ev.cached_tokens) + "}\n\ndata: [DONE]\n\n";
      } else if (ev.cause == engine::FinishCause::kError) {
        im_->count_error(Protocol::kCompletions);
        *out = Response::json(api::http_status_of(ev.error), api::openai_error_json(ev.error));
      } else {
        *out = Response::json(200, choice(text_, finish_name(ev.cause)) +
                                       usage_json(ev.prompt_tokens, n_, ev.cached_tokens) + "}");
      }
    }
    if (done_) im_->finish_metrics(t0_, ttft_);
    return done_;
  }

 private:
  std::string choice(const std::string& text, const char* finish) const {
    return "{\"id\":\"" + id_ +
           "\",\"object\":\"text_completion\",\"created\":" + std::to_string(created_) +
           ",\"model\":" + quote(im_->opt.model_name) +
           ",\"choices\":[{\"index\":0,\"text\":" + quote(text) +
           ",\"logprobs\":null,\"finish_reason\":" +
           (finish ? quote(finish) : std::string("null")) + "}]";
  }
  static std::string usage_json(int64_t pt, int64_t ct, int64_t cached) {
    return ",\"usage\":{\"prompt_tokens\":" + std::to_string(pt) +
           ",\"completion_tokens\":" + std::to_string(ct) +
           ",\"total_tokens\":" + std::to_string(pt + ct) +
           ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(cached) + "}}";
  }
  static const char* finish_name(engine::FinishCause c) {
    return c == engine::FinishCause::kLength ? "length" : "stop";
  }

  Server::Impl* im_;
  StreamDecoder dec_;
  api::StopMatcher stop_;
  std::string id_;
  int64_t created_;
  bool streaming_;
  Clock::time_point t0_;
  std::string text_;
  int64_t n_ = 0;
  bool done_ = false;
  double ttft_ = -1;
};

// A reply that streams SSE (status 200, text/event-stream) or waits for the whole body.
Reply producer_reply(std::unique_ptr<http::Producer> p, bool streaming) {
  Reply r;
  r.producer = std::move(p);
  r.stream = streaming;
  if (streaming) {
    r.response.content_type = "text/event-stream";
    r.response.headers.emplace_back("Cache-Control", "no-cache");
  }
  return r;
}

}  // namespace

Reply Server::Impl::route(Protocol p, const Request& req) {
  const auto t0 = Clock::now();
  if (auto r = admit(p, req)) return std::move(*r);
  Result<api::ConversationRequest> conv = invalid_argument("unreachable");
  if (p == Protocol::kChat) {
    api::ChatOptions o;
    o.max_body_bytes = opt.max_body_bytes;
    conv = api::parse_chat_request(req.body, o);
  } else if (p == Protocol::kMessages) {
    api::MessagesOptions o;
    o.max_body_bytes = opt.max_body_bytes;
    conv = api::parse_messages_request(req.body, o);
  } else {
    api::ResponsesOptions o;
    o.max_body_bytes = opt.max_body_bytes;
    conv = api::parse_responses_request(req.body, o);
  }
  if (!conv.is_ok()) return send_error(p, conv.status());
  auto rendered = api::render_api(*conv, api::PromptFormat::kV41);
  if (!rendered.is_ok()) return send_error(p, rendered.status());
  auto ids = encoder.encode(*rendered);
  if (!ids.is_ok()) return send_error(p, ids.status());
  if (Status st = check_prompt(ids->size()); !st.is_ok()) return send_error(p, st);
  auto parser = prompt::OutputParser::create(tok, conv->parsing_options());
  if (!parser.is_ok()) return send_error(p, parser.status());
  auto g = generation(conv->sampling, std::move(*ids), opt);
  if (opt.allow_forced_output) {
    Status fs = forced_ids(req.body, &g.forced_output);
    if (!fs.is_ok()) return send_error(p, fs);
  }
  auto stream = engine.submit(std::move(g));
  if (!stream.is_ok()) return send_error(p, stream.status());
  const std::string model = conv->model.empty() ? opt.model_name : conv->model;
  const int64_t created = int64_t(std::time(nullptr));
  const bool streaming = conv->stream;
  std::unique_ptr<http::Producer> producer;
  if (p == Protocol::kChat) {
    producer = std::make_unique<ConversationProducer<api::ChatResponder>>(
        this, *stream, std::move(*parser),
        api::ChatResponder(random_id("chatcmpl-"), model, created, conv->thinking,
                           conv->include_usage),
        streaming, t0);
  } else if (p == Protocol::kMessages) {
    producer = std::make_unique<ConversationProducer<api::MessagesResponder>>(
        this, *stream, std::move(*parser),
        api::MessagesResponder(random_id(""), model, conv->thinking), streaming, t0);
  } else {
    producer = std::make_unique<ConversationProducer<api::ResponsesResponder>>(
        this, *stream, std::move(*parser), api::ResponsesResponder(random_id(""), model, created),
        streaming, t0);
  }
  return producer_reply(std::move(producer), streaming);
}

// OpenAI (legacy) Completions: `prompt` is a string or a list of token ids; the text is
// continued as is (no chat template).
Reply Server::Impl::completions(const Request& req) {
  const Protocol p = Protocol::kCompletions;
  const auto t0 = Clock::now();
  if (auto r = admit(p, req)) return std::move(*r);
  auto body = pyjson::parse(req.body);
  if (!body.is_ok() || !body->is_object())
    return send_error(p, invalid_argument("the body must be a JSON object"));
  const Value* prompt_v = body->find("prompt");
  std::vector<int32_t> ids;
  if (prompt_v != nullptr && prompt_v->is_string()) {
    auto e = tok.encode(prompt_v->text);
    if (!e.is_ok()) return send_error(p, e.status());
    ids = std::move(*e);
  } else if (prompt_v != nullptr && prompt_v->is_array()) {
    for (const Value& v : prompt_v->items) {
      int64_t x = 0;
      if (!v.int_fits_int64(&x) || x < 0 || x > INT32_MAX)
        return send_error(p, invalid_argument("'prompt' token ids must be integers"));
      ids.push_back(int32_t(x));
    }
  } else {
    return send_error(p, invalid_argument("'prompt' must be a string or a list of token ids"));
  }
  if (ids.empty()) return send_error(p, invalid_argument("'prompt' is empty"));
  if (Status st = check_prompt(ids.size()); !st.is_ok()) return send_error(p, st);
  api::SamplingParams sp;
  auto number = [&](const char* k) -> std::optional<double> {
    const Value* v = body->find(k);
    if (v == nullptr || v->is_null()) return std::nullopt;
    int64_t i;
    if (v->int_fits_int64(&i)) return double(i);
    if (v->kind == Value::Kind::kFloat) return v->number;
    return std::nullopt;
  };
  sp.temperature = number("temperature");
  sp.top_p = number("top_p");
  sp.presence_penalty = number("presence_penalty");
  sp.frequency_penalty = number("frequency_penalty");
  sp.min_p = number("min_p");
  sp.repetition_penalty = number("repetition_penalty");
  if (sp.min_p && !(*sp.min_p >= 0 && *sp.min_p <= 1))
    return send_error(p, invalid_argument("'min_p' must be in [0, 1]"));
  if (sp.repetition_penalty && !(*sp.repetition_penalty > 0 && *sp.repetition_penalty <= 10))
    return send_error(p, invalid_argument("'repetition_penalty' must be in (0, 10]"));
  std::vector<std::string> stops;
  if (Status st = api::read_stop_field(*body, &stops); !st.is_ok()) return send_error(p, st);
  // OpenAI's default for this endpoint is 16; a larger request is capped by the context.
  if (auto v = number("max_tokens"))
    sp.max_tokens = int64_t(std::min(*v, 9.0e18));
  else
    sp.max_tokens = 16;
  if (auto v = number("seed")) sp.seed = int64_t(*v);
  if (auto v = number("top_k")) sp.top_k = int64_t(*v);
  if (sp.max_tokens && *sp.max_tokens < 1)
    return send_error(p, invalid_argument("'max_tokens' must be at least 1"));
  const Value* st = body->find("stream");
  const bool streaming = st != nullptr && st->kind == Value::Kind::kBool && st->boolean;
  auto g = generation(sp, ids, opt);
  if (opt.allow_forced_output) {
    Status fs = forced_ids(req.body, &g.forced_output);
    if (!fs.is_ok()) return send_error(p, fs);
  }
  const Value* ie = body->find("ignore_eos");
  g.ignore_eos = ie != nullptr && ie->kind == Value::Kind::kBool && ie->boolean;
  auto stream = engine.submit(std::move(g));
  if (!stream.is_ok()) return send_error(p, stream.status());
  return producer_reply(
      std::make_unique<CompletionProducer>(this, *stream, std::move(stops), random_id("cmpl-"),
                                           int64_t(std::time(nullptr)), streaming, t0),
      streaming);
}

Response Server::Impl::health() {
  const EngineHealth h = engine_health();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", h.stalled_seconds);
  if (!h.alive || h.stalled_seconds > opt.health_stall_s) {
    return Response::json(503, std::string("{\"status\":\"unhealthy\",\"engine_alive\":") +
                                   (h.alive ? "true" : "false") +
                                   ",\"engine_stalled_seconds\":" + buf + "}");
  }
  return Response::json(200,
                        std::string("{\"status\":\"ok\",\"engine_stalled_seconds\":") + buf + "}");
}

std::string Server::Impl::metrics_text() {
  engine::EngineStats e = engine.stats();
  std::ostringstream o;
  auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << v << "\n";
  };
  {
    std::lock_guard<std::mutex> lock(metrics.mu);
    o << "# HELP fathom_requests_total HTTP requests by endpoint\n# TYPE fathom_requests_total "
         "counter\n";
    for (int p = 0; p < 4; ++p)
      o << "fathom_requests_total{endpoint=\"" << protocol_name(Protocol(p)) << "\"} "
        << metrics.requests[p] << "\n";
    o << "# HELP fathom_request_errors_total Failed requests by endpoint\n# TYPE "
         "fathom_request_errors_total counter\n";
    for (int p = 0; p < 4; ++p)
      o << "fathom_request_errors_total{endpoint=\"" << protocol_name(Protocol(p)) << "\"} "
        << metrics.errors[p] << "\n";
    o << "# HELP fathom_time_to_first_token_seconds Time to first token\n# TYPE "
         "fathom_time_to_first_token_seconds summary\n"
      << "fathom_time_to_first_token_seconds_sum " << metrics.ttft_sum << "\n"
      << "fathom_time_to_first_token_seconds_count " << metrics.ttft_count << "\n";
    o << "# HELP fathom_request_seconds Request latency\n# TYPE fathom_request_seconds summary\n"
      << "fathom_request_seconds_sum " << metrics.latency_sum << "\n"
      << "fathom_request_seconds_count " << metrics.latency_count << "\n";
  }
  gauge("fathom_prompt_tokens_total", "Prompt tokens of finished requests", double(e.prompt_tokens),
        "counter");
  gauge("fathom_generation_tokens_total", "Generated tokens", double(e.generated_tokens),
        "counter");
  gauge("fathom_prefix_cache_hit_tokens_total", "Prompt tokens served by the prefix cache",
        double(e.cached_tokens), "counter");
  gauge("fathom_preemptions_total", "Sequences preempted for recompute", double(e.preemptions),
        "counter");
  gauge("fathom_queue_depth", "Requests waiting for admission", double(e.waiting));
  gauge("fathom_running_sequences", "Sequences admitted", double(e.running));
  gauge("fathom_batch_size", "Sequences in the last step", double(e.batch_size_last));
  gauge("fathom_step_tokens", "Tokens in the last step", double(e.step_tokens_last));
  gauge("fathom_kv_bytes", "KV pages in use, bytes", double(e.kv_bytes));
  gauge("fathom_kv_budget_bytes", "KV page pool, bytes", double(e.kv_budget_bytes));
  gauge("fathom_kv_pages_used", "KV pages in use", double(e.kv_pages_used));
  gauge("fathom_kv_pages_total", "KV pages in the pool", double(e.kv_pages_total));
  gauge("fathom_kv_page_bytes", "Bytes per KV page", double(e.kv_page_bytes));
  gauge("fathom_prefix_cache_bytes", "KV pages held by cached prefix blocks, bytes",
        double(e.prefix_cache_bytes));
  o << "# HELP fathom_engine_seconds_total Engine thread time by phase\n# TYPE "
       "fathom_engine_seconds_total counter\n";
  for (auto [phase, v] : {std::pair<const char*, double>{"plan", e.plan_seconds},
                          {"body", e.body_seconds},
                          {"head", e.head_seconds},
                          {"sample", e.sample_seconds},
                          {"post", e.post_seconds}})
    o << "fathom_engine_seconds_total{phase=\"" << phase << "\"} " << v << "\n";
  gauge("fathom_swa_replay_tokens_total", "Prompt tokens recomputed by SWA bounded replay",
        double(e.replayed_tokens), "counter");
  gauge("fathom_prefix_cache_blocks", "Prefix-cache blocks held", double(e.prefix_blocks));
  const http::HttpServer::Stats h = http.stats();
  gauge("fathom_http_connections", "Open HTTP connections", double(h.connections));
  gauge("fathom_http_connections_total", "Accepted HTTP connections", double(h.accepted),
        "counter");
  gauge("fathom_http_connections_rejected_total",
        "Connections answered 503 at the connection limit", double(h.rejected), "counter");
  gauge("fathom_http_header_timeouts_total", "Connections dropped for a slow request head",
        double(h.header_timeouts), "counter");
  gauge("fathom_http_client_disconnects_total", "Clients gone before their reply ended",
        double(h.client_disconnects), "counter");
  return o.str();
}

Server::Server(engine::Engine& engine, const Tokenizer& tokenizer,
               const prompt::PromptEncoder& encoder, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, encoder, std::move(options))) {
  Impl* im = impl_.get();
  http::HttpServer& h = im->http;
  h.set_error_body(transport_error_json);
  h.route("POST", "/v1/chat/completions",
          [im](const Request& q) { return im->route(Protocol::kChat, q); });
  h.route("POST", "/v1/messages",
          [im](const Request& q) { return im->route(Protocol::kMessages, q); });
  h.route("POST", "/v1/responses",
          [im](const Request& q) { return im->route(Protocol::kResponses, q); });
  h.route("POST", "/v1/completions", [im](const Request& q) { return im->completions(q); });
  h.route(
      "GET", "/v1/models",
      [im](const Request& q) {
        if (auto r = im->unauthorized(Protocol::kCompletions, q)) return std::move(*r);
        return Reply::of(Response::json(
            200, "{\"object\":\"list\",\"data\":[{\"id\":" + quote(im->opt.model_name) +
                     ",\"object\":\"model\",\"created\":0,\"owned_by\":\"fathom\"}]}"));
      },
      http::Dispatch::kInline);
  // vLLM-style /tokenize and /detokenize (text with added-token matching <-> ids).
  h.route("POST", "/tokenize", [im](const Request& q) {
    if (auto r = im->unauthorized(Protocol::kCompletions, q)) return std::move(*r);
    auto body = pyjson::parse(q.body);
    const Value* t = body.is_ok() && body->is_object() ? body->find("prompt") : nullptr;
    if (t == nullptr || !t->is_string())
      return im->send_error(Protocol::kCompletions, invalid_argument("'prompt' must be a string"));
    auto ids = im->tok.encode(t->text);
    if (!ids.is_ok()) return im->send_error(Protocol::kCompletions, ids.status());
    std::string out = "{\"tokens\":";
    json::append_int_array(out, *ids);
    out += ",\"count\":" + std::to_string(ids->size()) + "}";
    return Reply::of(Response::json(200, std::move(out)));
  });
  h.route("POST", "/detokenize", [im](const Request& q) {
    if (auto r = im->unauthorized(Protocol::kCompletions, q)) return std::move(*r);
    auto body = pyjson::parse(q.body);
    const Value* t = body.is_ok() && body->is_object() ? body->find("tokens") : nullptr;
    std::vector<int32_t> ids;
    bool ok = t != nullptr && t->is_array();
    for (size_t i = 0; ok && i < t->items.size(); ++i) {
      int64_t x = 0;
      ok = t->items[i].int_fits_int64(&x) && x >= 0 && x <= INT32_MAX;
      ids.push_back(int32_t(x));
    }
    if (!ok)
      return im->send_error(Protocol::kCompletions,
                            invalid_argument("'tokens' must be a list of token ids"));
    auto text = im->tok.decode(ids);
    if (!text.is_ok()) return im->send_error(Protocol::kCompletions, text.status());
    return Reply::of(Response::json(200, "{\"prompt\":" + quote(*text) + "}"));
  });
  // Served on the io threads: never behind the workers, and they only read the engine's
  // counters (a short lock).
  h.route(
      "GET", "/health", [im](const Request&) { return Reply::of(im->health()); },
      http::Dispatch::kInline);
  h.route(
      "GET", "/metrics",
      [im](const Request&) {
        Response r = Response::json(200, im->metrics_text());
        r.content_type = "text/plain; version=0.0.4";
        return Reply::of(std::move(r));
      },
      http::Dispatch::kInline);
}

Server::~Server() { stop(); }

Status Server::listen() { return impl_->http.listen(); }

void Server::run() { impl_->http.run(); }

void Server::stop() {
  if (impl_) impl_->http.stop();
}

int Server::port() const { return impl_->http.port(); }

}  // namespace fathom::serve
