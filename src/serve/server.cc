#include "serve/server.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>
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
#include "tokenizer/tokenizer.h"

namespace fathom::serve {
namespace {

using Clock = std::chrono::steady_clock;
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

}  // namespace

struct Server::Impl {
  engine::Engine& engine;
  const Tokenizer& tok;
  const prompt::PromptEncoder& encoder;
  ServerOptions opt;
  httplib::Server http;
  Metrics metrics;
  int32_t eos = -1;

  Impl(engine::Engine& e, const Tokenizer& t, const prompt::PromptEncoder& enc, ServerOptions o)
      : engine(e), tok(t), encoder(enc), opt(std::move(o)) {
    eos = tok.id_of("<｜end▁of▁sentence｜>");
  }

  std::string error_body(Protocol p, const Status& s) const {
    return p == Protocol::kMessages ? api::anthropic_error_json(s) : api::openai_error_json(s);
  }

  void count_error(Protocol p) {
    std::lock_guard<std::mutex> lock(metrics.mu);
    ++metrics.errors[int(p)];
  }

  void send_error(Protocol p, httplib::Response& res, const Status& s, int http_status = 0) {
    count_error(p);
    res.status = http_status ? http_status : api::http_status_of(s);
    res.set_content(error_body(p, s), "application/json");
  }

  // True when the request carries the API key (or none is configured); otherwise writes the
  // protocol's 401 (OpenAI shape unless `p` is Messages).
  bool authorize(Protocol p, const httplib::Request& req, httplib::Response& res) const {
    if (opt.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + opt.api_key ||
        req.get_header_value("x-api-key") == opt.api_key)
      return true;
    res.status = 401;
    res.set_content(
        p == Protocol::kMessages
            ? R"({"type":"error","error":{"type":"authentication_error","message":"invalid or missing API key"}})"
            : R"({"error":{"message":"invalid or missing API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}})",
        "application/json");
    return false;
  }

  // The start of every POST /v1/* request: counted, authorised, size-checked (413).
  bool admit(Protocol p, const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(metrics.mu);
      ++metrics.requests[int(p)];
    }
    if (!authorize(p, req, res)) {
      count_error(p);
      return false;
    }
    if (req.body.size() > opt.max_body_bytes) {
      send_error(p, res,
                 invalid_argument("request body larger than " + std::to_string(opt.max_body_bytes) +
                                  " bytes"),
                 413);
      return false;
    }
    return true;
  }

  void route(Protocol p, const httplib::Request& req, httplib::Response& res);
  void completions(const httplib::Request& req, httplib::Response& res);
  std::string metrics_text();
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
  g.max_tokens = std::min(s.max_tokens.value_or(opt.default_max_tokens), opt.max_tokens_cap);
  return g;
}

// Streams or folds one generation through the parser and a protocol responder.
template <typename Responder>
struct Generation {
  std::shared_ptr<engine::RequestStream> stream;
  prompt::OutputParser parser;
  Responder responder;
  api::Usage usage;
  bool done = false;
  double ttft = -1;

  // The next piece of the response (SSE text in streaming mode); empty when done.
  std::string step(bool streaming, int timeout_ms) {
    std::vector<prompt::ParserEvent> events;
    engine::StreamEvent ev;
    if (!stream->next(&ev, timeout_ms)) return {};
    usage.prompt_tokens = ev.prompt_tokens;
    usage.cached_tokens = ev.cached_tokens;
    if (ev.first_token_seconds > 0) ttft = ev.first_token_seconds;
    for (int32_t t : ev.tokens) {
      usage.completion_tokens += 1;
      if (!parser.finished()) (void)parser.push(t, events);
    }
    if (ev.finished && !parser.finished()) {
      parser.finish(ev.cause == engine::FinishCause::kLength ? prompt::FinishReason::kLength
                                                             : prompt::FinishReason::kEndOfStream,
                    events);
    }
    if (parser.finished()) {
      done = true;
      stream->cancel();  // a stop sequence ends generation early
    }
    if (streaming) return responder.stream(events, usage);
    responder.add(events);
    return {};
  }
};

}  // namespace

void Server::Impl::route(Protocol p, const httplib::Request& req, httplib::Response& res) {
  const auto t0 = Clock::now();
  if (!admit(p, req, res)) return;
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
  if (!conv.is_ok()) return send_error(p, res, conv.status());
  auto rendered = api::render_api(*conv, api::PromptFormat::kV41);
  if (!rendered.is_ok()) return send_error(p, res, rendered.status());
  auto ids = encoder.encode(*rendered);
  if (!ids.is_ok()) return send_error(p, res, ids.status());
  if (int64_t(ids->size()) > opt.max_prompt_tokens)
    return send_error(
        p, res,
        invalid_argument("the prompt has " + std::to_string(ids->size()) +
                         " tokens; the limit is " + std::to_string(opt.max_prompt_tokens)));
  auto parser = prompt::OutputParser::create(tok, conv->parsing_options());
  if (!parser.is_ok()) return send_error(p, res, parser.status());
  auto g = generation(conv->sampling, std::move(*ids), opt);
  if (opt.allow_forced_output) {
    Status fs = forced_ids(req.body, &g.forced_output);
    if (!fs.is_ok()) return send_error(p, res, fs);
  }
  auto stream = engine.submit(std::move(g));
  if (!stream.is_ok()) return send_error(p, res, stream.status());
  const std::string model = conv->model.empty() ? opt.model_name : conv->model;
  const int64_t created = int64_t(std::time(nullptr));
  const bool streaming = conv->stream;

  auto finish_metrics = [this, t0](double ttft) {
    std::lock_guard<std::mutex> lock(metrics.mu);
    if (ttft > 0) {
      metrics.ttft_sum += ttft;
      ++metrics.ttft_count;
    }
    metrics.latency_sum += std::chrono::duration<double>(Clock::now() - t0).count();
    ++metrics.latency_count;
  };
  auto run = [&](auto gen) {
    if (!streaming) {
      while (!gen->done) gen->step(false, 3600 * 1000);
      finish_metrics(gen->ttft);
      res.set_content(gen->responder.complete(gen->usage), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [gen, finish_metrics](size_t, httplib::DataSink& sink) {
          while (!gen->done) {
            if (!sink.is_writable()) {
              gen->stream->cancel();  // the client went away
              return false;
            }
            std::string out = gen->step(true, 200);
            if (!out.empty() && !sink.write(out.data(), out.size())) {
              gen->stream->cancel();
              return false;
            }
          }
          finish_metrics(gen->ttft);
          sink.done();
          return true;
        },
        [gen](bool) { gen->stream->cancel(); });
  };
  if (p == Protocol::kChat) {
    auto gen = std::make_shared<Generation<api::ChatResponder>>(
        Generation<api::ChatResponder>{*stream, std::move(*parser),
                                       api::ChatResponder(random_id("chatcmpl-"), model, created,
                                                          conv->thinking, conv->include_usage)});
    run(gen);
  } else if (p == Protocol::kMessages) {
    auto gen =
        std::make_shared<Generation<api::MessagesResponder>>(Generation<api::MessagesResponder>{
            *stream, std::move(*parser),
            api::MessagesResponder(random_id(""), model, conv->thinking)});
    run(gen);
  } else {
    auto gen =
        std::make_shared<Generation<api::ResponsesResponder>>(Generation<api::ResponsesResponder>{
            *stream, std::move(*parser), api::ResponsesResponder(random_id(""), model, created)});
    run(gen);
  }
}

// OpenAI (legacy) Completions: `prompt` is a string or a list of token ids; the text is
// continued as is (no chat template).
void Server::Impl::completions(const httplib::Request& req, httplib::Response& res) {
  const Protocol p = Protocol::kCompletions;
  const auto t0 = Clock::now();
  if (!admit(p, req, res)) return;
  auto body = pyjson::parse(req.body);
  if (!body.is_ok() || !body->is_object())
    return send_error(p, res, invalid_argument("the body must be a JSON object"));
  const Value* prompt_v = body->find("prompt");
  std::vector<int32_t> ids;
  if (prompt_v != nullptr && prompt_v->is_string()) {
    auto e = tok.encode(prompt_v->text);
    if (!e.is_ok()) return send_error(p, res, e.status());
    ids = std::move(*e);
  } else if (prompt_v != nullptr && prompt_v->is_array()) {
    for (const Value& v : prompt_v->items) {
      int64_t x = 0;
      if (!v.int_fits_int64(&x) || x < 0 || x > INT32_MAX)
        return send_error(p, res, invalid_argument("'prompt' token ids must be integers"));
      ids.push_back(int32_t(x));
    }
  } else {
    return send_error(p, res, invalid_argument("'prompt' must be a string or a list of token ids"));
  }
  if (ids.empty()) return send_error(p, res, invalid_argument("'prompt' is empty"));
  if (int64_t(ids.size()) > opt.max_prompt_tokens)
    return send_error(p, res, invalid_argument("the prompt is too long"));
  api::SamplingParams sp;
  auto number = [&](const char* k) -> std::optional<double> {
    const Value* v = body->find(k);
    if (v == nullptr || v->is_null()) return std::nullopt;
    double d;
    int64_t i;
    if (v->int_fits_int64(&i)) return double(i);
    if (v->kind == Value::Kind::kFloat) {
      d = v->number;
      return d;
    }
    return std::nullopt;
  };
  sp.temperature = number("temperature");
  sp.top_p = number("top_p");
  sp.presence_penalty = number("presence_penalty");
  sp.frequency_penalty = number("frequency_penalty");
  sp.min_p = number("min_p");
  sp.repetition_penalty = number("repetition_penalty");
  if (sp.min_p && !(*sp.min_p >= 0 && *sp.min_p <= 1))
    return send_error(p, res, invalid_argument("'min_p' must be in [0, 1]"));
  if (sp.repetition_penalty && !(*sp.repetition_penalty > 0 && *sp.repetition_penalty <= 10))
    return send_error(p, res, invalid_argument("'repetition_penalty' must be in (0, 10]"));
  std::vector<std::string> stops;
  if (Status st = api::read_stop_field(*body, &stops); !st.is_ok()) return send_error(p, res, st);
  if (auto v = number("max_tokens"))
    sp.max_tokens = int64_t(*v);
  else
    sp.max_tokens = 16;
  if (auto v = number("seed")) sp.seed = int64_t(*v);
  if (auto v = number("top_k")) sp.top_k = int64_t(*v);
  if (sp.max_tokens && *sp.max_tokens < 1)
    return send_error(p, res, invalid_argument("'max_tokens' must be at least 1"));
  const Value* st = body->find("stream");
  const bool streaming = st != nullptr && st->kind == Value::Kind::kBool && st->boolean;
  auto g = generation(sp, ids, opt);
  if (opt.allow_forced_output) {
    Status fs = forced_ids(req.body, &g.forced_output);
    if (!fs.is_ok()) return send_error(p, res, fs);
  }
  const Value* ie = body->find("ignore_eos");
  g.ignore_eos = ie != nullptr && ie->kind == Value::Kind::kBool && ie->boolean;
  auto stream = engine.submit(std::move(g));
  if (!stream.is_ok()) return send_error(p, res, stream.status());
  const std::string id = random_id("cmpl-");
  const int64_t created = int64_t(std::time(nullptr));
  auto s = *stream;
  auto choice = [id, created, model = opt.model_name](const std::string& text, const char* finish) {
    std::string j =
        "{\"id\":\"" + id +
        "\",\"object\":\"text_completion\",\"created\":" + std::to_string(created) +
        ",\"model\":" + quote(model) + ",\"choices\":[{\"index\":0,\"text\":" + quote(text) +
        ",\"logprobs\":null,\"finish_reason\":" + (finish ? quote(finish) : std::string("null")) +
        "}]";
    return j;
  };
  auto usage_json = [](int64_t pt, int64_t ct, int64_t cached) {
    return ",\"usage\":{\"prompt_tokens\":" + std::to_string(pt) +
           ",\"completion_tokens\":" + std::to_string(ct) +
           ",\"total_tokens\":" + std::to_string(pt + ct) +
           ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(cached) + "}}";
  };
  auto finish_name = [](engine::FinishCause c) {
    return c == engine::FinishCause::kLength ? "length" : "stop";
  };
  if (!streaming) {
    StreamDecoder dec(tok, true);
    api::StopMatcher stop(stops);
    std::string text;
    engine::StreamEvent ev;
    int64_t n = 0;
    while (s->next(&ev, 3600 * 1000)) {
      std::string piece;
      for (int32_t t : ev.tokens) {
        ++n;
        if (t != eos) (void)dec.push(t, piece);
      }
      if (ev.finished) dec.finish(piece);
      if (stop.push(piece, &text)) {
        s->cancel();  // the engine stops at its next step
        ev.cause = engine::FinishCause::kStopToken;
        break;
      }
      if (ev.finished) break;
    }
    stop.finish(&text);
    if (ev.cause == engine::FinishCause::kError) return send_error(p, res, ev.error);
    res.set_content(choice(text, finish_name(ev.cause)) +
                        usage_json(ev.prompt_tokens, n, ev.cached_tokens) + "}",
                    "application/json");
    std::lock_guard<std::mutex> lock(metrics.mu);
    metrics.latency_sum += std::chrono::duration<double>(Clock::now() - t0).count();
    ++metrics.latency_count;
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  auto dec = std::make_shared<StreamDecoder>(tok, true);
  auto stop = std::make_shared<api::StopMatcher>(stops);
  res.set_chunked_content_provider(
      "text/event-stream",
      [s, dec, stop, choice, usage_json, finish_name, this](size_t, httplib::DataSink& sink) {
        engine::StreamEvent ev;
        int64_t n = 0;
        for (;;) {
          if (!sink.is_writable()) {
            s->cancel();
            return false;
          }
          if (!s->next(&ev, 200)) continue;
          std::string piece, text;
          for (int32_t t : ev.tokens) {
            ++n;
            if (t != eos) (void)dec->push(t, piece);
          }
          if (ev.finished) dec->finish(piece);
          if (stop->push(piece, &text)) {
            s->cancel();
            ev.finished = true;
            ev.cause = engine::FinishCause::kStopToken;
          } else if (ev.finished) {
            stop->finish(&text);
          }
          std::string out;
          if (!text.empty()) out += "data: " + choice(text, nullptr) + "}\n\n";
          if (ev.finished) {
            out += "data: " + choice("", finish_name(ev.cause)) +
                   usage_json(ev.prompt_tokens, n, ev.cached_tokens) + "}\n\ndata: [DONE]\n\n";
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            s->cancel();
            return false;
          }
          if (ev.finished) break;
        }
        sink.done();
        return true;
      },
      [s](bool) { s->cancel(); });
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
  return o.str();
}

Server::Server(engine::Engine& engine, const Tokenizer& tokenizer,
               const prompt::PromptEncoder& encoder, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, encoder, std::move(options))) {
  Impl* im = impl_.get();
  const int threads = im->opt.threads;
  im->http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  im->http.set_payload_max_length(im->opt.max_body_bytes + 1);
  im->http.Post("/v1/chat/completions", [im](const httplib::Request& q, httplib::Response& r) {
    im->route(Protocol::kChat, q, r);
  });
  im->http.Post("/v1/messages", [im](const httplib::Request& q, httplib::Response& r) {
    im->route(Protocol::kMessages, q, r);
  });
  im->http.Post("/v1/responses", [im](const httplib::Request& q, httplib::Response& r) {
    im->route(Protocol::kResponses, q, r);
  });
  im->http.Post("/v1/completions",
                [im](const httplib::Request& q, httplib::Response& r) { im->completions(q, r); });
  im->http.Get("/v1/models", [im](const httplib::Request& q, httplib::Response& r) {
    if (!im->authorize(Protocol::kCompletions, q, r)) return;
    r.set_content("{\"object\":\"list\",\"data\":[{\"id\":" + quote(im->opt.model_name) +
                      ",\"object\":\"model\",\"created\":0,\"owned_by\":\"fathom\"}]}",
                  "application/json");
  });
  // vLLM-style /tokenize and /detokenize (text with added-token matching <-> ids).
  im->http.Post("/tokenize", [im](const httplib::Request& q, httplib::Response& r) {
    if (!im->authorize(Protocol::kCompletions, q, r)) return;
    auto body = pyjson::parse(q.body);
    const Value* t = body.is_ok() && body->is_object() ? body->find("prompt") : nullptr;
    if (t == nullptr || !t->is_string())
      return im->send_error(Protocol::kCompletions, r,
                            invalid_argument("'prompt' must be a string"));
    auto ids = im->tok.encode(t->text);
    if (!ids.is_ok()) return im->send_error(Protocol::kCompletions, r, ids.status());
    std::string out = "{\"tokens\":";
    json::append_int_array(out, *ids);
    out += ",\"count\":" + std::to_string(ids->size()) + "}";
    r.set_content(out, "application/json");
  });
  im->http.Post("/detokenize", [im](const httplib::Request& q, httplib::Response& r) {
    if (!im->authorize(Protocol::kCompletions, q, r)) return;
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
      return im->send_error(Protocol::kCompletions, r,
                            invalid_argument("'tokens' must be a list of token ids"));
    auto text = im->tok.decode(ids);
    if (!text.is_ok()) return im->send_error(Protocol::kCompletions, r, text.status());
    r.set_content("{\"prompt\":" + quote(*text) + "}", "application/json");
  });
  im->http.Get("/health", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("{\"status\":\"ok\"}", "application/json");
  });
  im->http.Get("/metrics", [im](const httplib::Request&, httplib::Response& r) {
    r.set_content(im->metrics_text(), "text/plain; version=0.0.4");
  });
  im->http.set_error_handler([](const httplib::Request&, httplib::Response& r) {
    if (r.status == 404)
      r.set_content(
          R"({"error":{"message":"not found","type":"invalid_request_error","param":null,"code":null}})",
          "application/json");
  });
}

Server::~Server() { stop(); }

Status Server::run() {
  const int port =
      impl_->opt.port == 0
          ? impl_->http.bind_to_any_port(impl_->opt.host)
          : (impl_->http.bind_to_port(impl_->opt.host, impl_->opt.port) ? impl_->opt.port : -1);
  if (port < 0)
    return io_error("cannot listen on " + impl_->opt.host + ":" + std::to_string(impl_->opt.port));
  port_.store(port);
  if (!impl_->http.listen_after_bind()) return io_error("the HTTP server stopped with an error");
  return Status::ok();
}

void Server::stop() {
  if (impl_) impl_->http.stop();
}

}  // namespace fathom::serve
