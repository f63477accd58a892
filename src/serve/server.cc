#include "serve/server.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "api/anthropic_messages.h"
#include "api/chat_completions.h"
#include "api/completions.h"
#include "api/errors.h"
#include "api/models.h"
#include "api/openai_responses.h"
#include "api/sglang_generate.h"
#include "api/stop_matcher.h"
#include "api/tokenize.h"
#include "core/json_write.h"
#include "core/py_json.h"
#include "core/utf8.h"
#include "engine/generator.h"
#include "grammar/compile_queue.h"
#include "grammar/dsml.h"
#include "grammar/grammar_cache.h"
#include "grammar/token_table.h"
#include "kv/prefix_cache.h"
#include "prompt/encoder.h"
#include "prompt/output_parser.h"
#include "serve/grammar_wait.h"
#include "serve/http_server.h"
#include "serve/kv_event_routes.h"
#include "serve/logit_controls.h"
#include "serve/pd_routes.h"
#include "tokenizer/tokenizer.h"

namespace fathom::serve {
namespace {

using Clock = std::chrono::steady_clock;
using http::Reply;
using http::Request;
using http::Response;
using pyjson::Value;

enum class Protocol { kChat, kMessages, kResponses, kCompletions, kGenerate };
constexpr int kProtocols = 5;

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
    case Protocol::kGenerate:
      return "generate";
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
  int64_t requests[kProtocols] = {}, errors[kProtocols] = {};
  double ttft_sum = 0, latency_sum = 0;
  int64_t ttft_count = 0, latency_count = 0;
};

// The fields read_test_hooks reads when its flags allow them: the adapters accept those.
constexpr std::string_view kTestHookFields[] = {"forced_output_ids", "fathom_inject_error_after"};

std::span<const std::string_view> test_hook_fields(const ServerOptions& opt) {
  const std::span<const std::string_view> all = kTestHookFields;
  if (opt.allow_forced_output) return opt.allow_error_injection ? all : all.first(1);
  return opt.allow_error_injection ? all.subspan(1) : all.first(0);
}

// The testing hooks a server may accept in a request body (each only when its flag allows):
// "forced_output_ids" (teacher-forced output ids) and "fathom_inject_error_after" (the
// engine fails the request after that many tokens).
Status read_test_hooks(std::string_view body, const ServerOptions& opt,
                       engine::GenerationRequest* g) {
  if (!opt.allow_forced_output && !opt.allow_error_injection) return Status::ok();
  auto v = pyjson::parse(body);
  if (!v.is_ok() || !v->is_object()) return Status::ok();  // the adapter reports bad JSON
  if (const Value* f = opt.allow_forced_output ? v->find("forced_output_ids") : nullptr) {
    if (!f->is_array()) return invalid_argument("'forced_output_ids' must be a list of token ids");
    for (const Value& e : f->items) {
      int64_t x = 0;
      if (!e.int_fits_int64(&x) || x < 0 || x > INT32_MAX)
        return invalid_argument("'forced_output_ids' must be a list of token ids");
      g->forced_output.push_back(int32_t(x));
    }
  }
  if (const Value* f = opt.allow_error_injection ? v->find("fathom_inject_error_after") : nullptr) {
    int64_t x = 0;
    if (!f->int_fits_int64(&x) || x < 0)
      return invalid_argument("'fathom_inject_error_after' must be a non-negative integer");
    g->inject_error_after = x;
  }
  return Status::ok();
}

// `s` as JavaScript's encodeURIComponent writes it (as clients build a path from a name).
std::string percent_encoded(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || std::strchr("-_.!~*'()", c) != nullptr) {
      out += c;
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", u);
      out += buf;
    }
  }
  return out;
}

// The JSON body of an error the transport answers itself (unknown path, wrong method, body
// too large, ...), in the shape of the API behind the path.
std::string transport_error_json(std::string_view path, int status, const std::string& message) {
  const bool anthropic = path == "/v1/messages" || path.starts_with("/v1/messages/");
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
    case 415:
      code = "unsupported_media_type";
      break;
    case 501:  // a transfer coding the server does not implement: the request's fault
      code = "not_implemented";
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

// A reply that streams SSE (status 200, text/event-stream) or waits for the whole body.
Reply producer_reply(std::unique_ptr<http::Producer> p, bool streaming) {
  Reply r;
  r.producer = std::move(p);
  r.stream = streaming;
  if (streaming) {
    r.response.content_type = "text/event-stream";
    r.response.headers.emplace_back("Cache-Control", "no-cache");
    r.heartbeat = ": keep-alive\n\n";  // an SSE comment: every client's parser skips it
  }
  return r;
}

}  // namespace

struct Server::Impl {
  engine::Generator& engine;
  const Tokenizer& tok;
  const prompt::PromptEncoder& encoder;
  ServerOptions opt;
  Metrics metrics;
  int32_t eos = -1, think_end = -1, dsml = -1;
  // Structured outputs: the vocabulary's token table (stop id: EOS), built once, and the
  // compiled grammars of recent requests. Null with `grammar_error` saying why.
  std::unique_ptr<grammar::GrammarCache> grammars;
  Status grammar_error;
  // Compiles the grammars the cache does not have, off the request workers (with grammars;
  // declared after it, so it stops first).
  std::unique_ptr<grammar::CompileQueue> compiles;
  std::vector<api::ServedModel> served;  // the names `model` may take; the first is the default
  // Each API key's default retention class (--api-key-retention).
  std::vector<std::pair<std::string, kv::RetentionClass>> key_retention;
  int64_t started = 0;                       // /v1/models' `created`
  std::unique_ptr<KvEventRoutes> kv_routes;  // with opt.kv_events; outlives its streams
  http::HttpServer http;                     // last: its connections (and their producers) go first

  static http::HttpServerOptions transport_options(const ServerOptions& o) {
    http::HttpServerOptions h;
    h.host = o.host;
    h.port = o.port;
    h.max_body_bytes = o.max_body_bytes;
    h.header_timeout_s = o.header_timeout_s;
    h.body_timeout_s = o.body_timeout_s;
    h.shutdown_timeout_s = o.shutdown_timeout_s;
    h.stream_heartbeat_s = o.stream_heartbeat_s;
    h.max_connections = o.max_connections;
    h.io_threads = o.io_threads;
    h.worker_threads = o.worker_threads;
    return h;
  }

  Impl(engine::Generator& e, const Tokenizer& t, const prompt::PromptEncoder& enc, ServerOptions o)
      : engine(e), tok(t), encoder(enc), opt(std::move(o)), http(transport_options(opt)) {
    eos = tok.id_of("<｜end▁of▁sentence｜>");
    think_end = tok.id_of("</think>");
    // The DSML marker is the grammars' one symbol: strict tool calls ask for it by id.
    dsml = tok.id_of("｜DSML｜");
    auto table = grammar::TokenTable::create(
        tok, size_t(engine.vocab_size()),
        eos >= 0 ? std::vector<int32_t>{eos} : std::vector<int32_t>{},
        dsml >= 0 ? std::vector<int32_t>{dsml} : std::vector<int32_t>{});
    if (table.is_ok()) {
      grammars = std::make_unique<grammar::GrammarCache>(std::move(*table), 256);
      // As many compile threads as request workers: as many compiles at once as before they
      // moved off the workers.
      compiles = std::make_unique<grammar::CompileQueue>(*grammars,
                                                         size_t(std::max(1, opt.worker_threads)));
    } else
      grammar_error = table.status();
    // Every configured name thinks by default (as the V4.1 template does); DeepSeek's own
    // names for the same weights follow: deepseek-chat (thinking off), deepseek-reasoner (on).
    for (const std::string& n : opt.model_names) {
      bool dup = false;
      for (const auto& m : served) dup |= m.name == n;
      if (!dup && !n.empty()) served.push_back({n, true});
    }
    for (const api::ServedModel& m : std::initializer_list<api::ServedModel>{
             {"deepseek-chat", false}, {"deepseek-reasoner", true}}) {
      bool dup = false;
      for (const auto& have : served) dup |= have.name == m.name;
      if (!dup) served.push_back(m);
    }
    started = int64_t(std::time(nullptr));
    for (const auto& [key, cls] : opt.api_key_retention)
      if (auto c = opt.retention.find(cls)) key_retention.emplace_back(key, *c);
  }

  std::string error_body(Protocol p, const Status& s) const {
    if (p == Protocol::kGenerate) return api::sglang_error_json(s);
    return p == Protocol::kMessages ? api::anthropic_error_json(s) : api::openai_error_json(s);
  }
  int error_status(Protocol p, const Status& s) const {
    return p == Protocol::kMessages ? api::anthropic_http_status_of(s) : api::http_status_of(s);
  }
  // The reply for an error of a request that is not a generation (not counted in /metrics).
  Reply error_reply(Protocol p, const Status& s) const {
    return Reply::of(Response::json(error_status(p, s), error_body(p, s)));
  }
  // The whole reply for an error that happened before anything was sent.
  Response error_response(Protocol p, const Status& s) {
    count_error(p);
    return Response::json(error_status(p, s), error_body(p, s));
  }

  void count_error(Protocol p) {
    std::lock_guard<std::mutex> lock(metrics.mu);
    ++metrics.errors[int(p)];
  }

  Reply send_error(Protocol p, const Status& s) { return Reply::of(error_response(p, s)); }

  // Whether the request carries API key `k` (Authorization: Bearer, the scheme in any case as
  // RFC 9110 11.1 has it, or x-api-key).
  static bool carries_key(const Request& req, const std::string& k) {
    const std::string_view auth = req.header("Authorization");
    constexpr std::string_view kBearer = "bearer ";
    return (auth.size() == kBearer.size() + k.size() &&
            http::iequals(auth.substr(0, kBearer.size()), kBearer) &&
            auth.substr(kBearer.size()) == k) ||
           req.header("x-api-key") == k;
  }

  // Nothing when the request carries one of `keys` (or there are none); otherwise the
  // protocol's 401 (OpenAI shape unless `p` is Messages).
  std::optional<Reply> unauthorized(Protocol p, const Request& req,
                                    const std::vector<std::string>& keys) const {
    if (keys.empty()) return std::nullopt;
    for (const std::string& k : keys)
      if (carries_key(req, k)) return std::nullopt;
    return Reply::of(Response::json(
        401,
        p == Protocol::kMessages
            ? R"({"type":"error","error":{"type":"authentication_error","message":"invalid or missing API key"}})"
            : R"({"error":{"message":"invalid or missing API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}})"));
  }
  // unauthorized() against the API keys (--api-key).
  std::optional<Reply> unauthorized(Protocol p, const Request& req) const {
    return unauthorized(p, req, opt.api_keys);
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

  // The prompt's token count against the context length (400 when no token would fit). The
  // caller reads the context once (a router's may change as its replicas do).
  static Status check_prompt(size_t n, int64_t context) {
    if (int64_t(n) >= context)
      return invalid_argument("the prompt has " + std::to_string(n) +
                              " tokens; the model's context length is " + std::to_string(context) +
                              " (prompt and output together)");
    return Status::ok();
  }

  // vLLM's truncate_prompt_tokens: only the prompt's last k ids are kept (k = -1: as many as
  // the context length; 0: all). A k above the context length is a 400, as in vLLM.
  static Status truncate_prompt(std::vector<int32_t>& ids, int64_t k, int64_t context) {
    if (k == 0) return Status::ok();
    if (k > context)
      return invalid_argument("'truncate_prompt_tokens' (" + std::to_string(k) +
                              ") is greater than the context length, " + std::to_string(context));
    if (k < 0) k = context;
    if (int64_t(ids.size()) > k) ids.erase(ids.begin(), ids.end() - k);
    return Status::ok();
  }

  // A request's constraint: what it compiles from (null for none) and the field its errors
  // name.
  struct Constraint {
    std::shared_ptr<const grammar::GrammarSpec> spec;  // also what a router ships to replicas
    std::string where;                                 // "'response_format'", "'tools'", ...
  };

  // The request's error for a constraint that did not compile: a 400 naming the field, or
  // kCancelled for a compile given up on its CancelToken (only a client still there, at the
  // server's drain deadline, reads that one).
  static Status compile_error(const std::string& where, const Status& s) {
    if (s.code() == StatusCode::kCancelled)
      return cancelled(where + ": " + s.message() + ": the server is shutting down");
    return invalid_argument(where + ": " +
                            (s.code() == StatusCode::kUnsupported ? "not supported: " : "") +
                            s.message());
  }

  // The constraint of a request's structured output (none when it asks for none).
  Result<Constraint> constraint_of(const api::StructuredOutput& so) {
    using K = api::StructuredOutput::Kind;
    if (!so.active()) return Constraint{};
    const std::string where = "'" + so.field + "'";
    if (!grammars)
      return invalid_argument(where +
                              ": structured outputs are unavailable: " + grammar_error.message());
    if (so.kind == K::kSpec) return Constraint{so.spec, where};  // a router's, exactly as given
    grammar::GrammarSpec spec;
    // JSON: compact (no whitespace) and, as vLLM's XGrammar backend does, an object schema
    // without additionalProperties admits only its listed properties (README).
    spec.json.whitespace = grammar::JsonSchemaOptions::Whitespace::kCompact;
    spec.json.strict_additional_properties = true;
    switch (so.kind) {
      case K::kJsonSchema:
        spec.kind = grammar::GrammarSpec::Kind::kJsonSchema;
        spec.text = so.text;
        break;
      case K::kJsonObject:  // any JSON object
        spec.kind = grammar::GrammarSpec::Kind::kJsonSchema;
        spec.text = R"({"type":"object"})";
        spec.json.strict_additional_properties = false;
        break;
      case K::kRegex:
        spec.kind = grammar::GrammarSpec::Kind::kRegex;
        spec.text = so.text;
        break;
      case K::kChoice:
        spec.kind = grammar::GrammarSpec::Kind::kChoice;
        spec.choices = so.choices;
        break;
      case K::kGbnf:
        spec.kind = grammar::GrammarSpec::Kind::kGbnf;
        spec.text = so.text;
        break;
      case K::kSpec:
      case K::kNone:
        break;
    }
    return Constraint{std::make_shared<const grammar::GrammarSpec>(std::move(spec)), where};
  }

  // The constraint of a request's tool-call block when some of its tools are strict (none
  // otherwise): their arguments follow their schemas; the others take any arguments.
  Result<Constraint> tools_constraint_of(const api::ConversationRequest& c) {
    if (c.strict_tools.empty() || c.tool_choice == api::ToolChoice::kNone) return Constraint{};
    if (!grammars || dsml < 0)
      return invalid_argument(
          "'tools': strict tools are unavailable: " +
          (grammars ? std::string("the tokenizer has no DSML marker") : grammar_error.message()));
    std::vector<grammar::DsmlTool> tools;
    for (const pyjson::Value& t : c.tools.items) {
      const pyjson::Value* fn = t.find("function");
      const std::string& name = fn->find("name")->text;
      const pyjson::Value* params = fn->find("parameters");
      tools.push_back(
          {name, params ? *params : pyjson::Value(),
           std::find(c.strict_tools.begin(), c.strict_tools.end(), name) != c.strict_tools.end()});
    }
    grammar::DsmlOptions o;
    o.v41 = true;                                              // the server renders V4.1 prompts
    o.in_block = c.tool_choice == api::ToolChoice::kRequired;  // the prompt opened the block
    grammar::GrammarSpec spec;
    spec.kind = grammar::GrammarSpec::Kind::kDsml;
    spec.text = grammar::dsml_spec_json(tools, o);
    return Constraint{std::make_shared<const grammar::GrammarSpec>(std::move(spec)), "'tools'"};
  }

  // Submits a request (its GenerationRequest complete) and builds its reply's producer.
  using Submit = std::function<Result<std::unique_ptr<http::Producer>>()>;
  // The reply of a request once its constraint is compiled: the compiled grammar and its spec
  // go into `gen`, then `submit` runs. Both happen now when there is no constraint or the
  // grammar cache has it; otherwise the compile goes on the CompileQueue and a
  // GrammarWaitProducer stands in until it is done, so this request worker is free. A spec
  // that does not build (malformed) is a 400 now. `stream_error` is the protocol's error event,
  // for a compile that fails after a heartbeat committed the stream.
  Reply with_constraint(const Request& req, Protocol p, bool streaming, Constraint c,
                        std::shared_ptr<engine::GenerationRequest> gen, Submit submit,
                        std::function<std::string(const Status&)> stream_error) {
    GrammarWaitProducer::Finish finish =
        [gen = std::move(gen), spec = c.spec,
         submit = std::move(submit)](std::shared_ptr<const grammar::CompiledGrammar> grammar) {
          if (grammar) {
            gen->grammar = std::move(grammar);
            gen->grammar_spec = spec;
          }
          return submit();
        };
    std::shared_ptr<const grammar::CompiledGrammar> ready;
    std::shared_ptr<const grammar::PreparedGrammar> prepared;
    if (c.spec) {
      auto built = grammar::prepare_grammar(*c.spec);
      if (!built.is_ok()) return send_error(p, compile_error(c.where, built.status()));
      prepared = std::move(*built);
      auto found = grammars->find(*prepared);
      if (!found.is_ok()) return send_error(p, compile_error(c.where, found.status()));
      ready = std::move(*found);
    }
    if (!c.spec || ready) {
      auto producer = finish(std::move(ready));
      if (!producer.is_ok()) return send_error(p, producer.status());
      return producer_reply(std::move(*producer), streaming);
    }
    GrammarWaitProducer::Hooks h;
    h.finish = std::move(finish);
    h.compile_error = [where = c.where](const Status& s) { return compile_error(where, s); };
    h.error_response = [this, p](const Status& s) { return error_response(p, s); };
    h.stream_error = [this, p, f = std::move(stream_error)](const Status& s) {
      count_error(p);
      return f(s);
    };
    return producer_reply(std::make_unique<GrammarWaitProducer>(*compiles, std::move(prepared),
                                                                std::move(h), client_of(req)),
                          streaming);
  }

  // Who sent a request, for sharing the grammar compiles fairly: the API key it was admitted
  // with when the server requires one, else its address (a header could name anyone: only a
  // peer --forwarded-allow-ips trusts may name it in X-Forwarded-For), an IPv6 one by its /64
  // (one host commonly holds a whole /64).
  std::string client_of(const Request& req) const {
    std::string key;
    for (const std::string& k : opt.api_keys)
      if (carries_key(req, k)) {
        key = "key " + k + " ";
        break;
      }
    // A trusted proxy (a router with its replica key) speaks for many clients: its
    // X-Forwarded-For says which, key or not.
    const std::string forwarded = forwarded_for_of(req.headers);
    if (!key.empty() && (forwarded.empty() || !opt.trusted_proxies.trusts(req.peer))) return key;
    const std::string addr = opt.trusted_proxies.client_address(req.peer, forwarded);
    unsigned char a[16];
    static constexpr unsigned char kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    if (::inet_pton(AF_INET6, addr.c_str(), a) == 1 && std::memcmp(a, kV4Mapped, 12) != 0)
      return key + "peer6 " + std::string(reinterpret_cast<const char*>(a), 8);
    return key + "peer " + addr;
  }

  // The KV-store retention class of a request: the class its `retention` names (an unknown
  // one is a 400), else the one its Anthropic cache_control ttl maps onto, else its API key's
  // default, else the server's default.
  Result<kv::RetentionClass> retention_of(Protocol p, const api::SamplingParams& s,
                                          const Request& req) const {
    const kv::RetentionPolicy& policy = opt.retention;
    if (!s.retention.empty() && !opt.retention_classes)
      return unsupported(std::string(p == Protocol::kMessages ? "retention: " : "'retention': ") +
                         "retention classes are not supported by this server's upstream");
    if (!s.retention.empty()) {
      if (auto c = policy.find(s.retention)) return *c;
      return invalid_argument(
          std::string(p == Protocol::kMessages ? "retention: " : "'retention': ") +
          "unknown retention class '" + s.retention + "' (this server has " + policy.names() + ")");
    }
    if (s.cache_control_ttl_ms > 0) return policy.for_ttl(s.cache_control_ttl_ms);
    for (const auto& [key, cls] : key_retention)
      if (carries_key(req, key)) return cls;
    return policy.default_class();
  }

  // The conversation of a Chat, Messages or Responses body; with `count_only`, of a token
  // count's body (the Messages and Responses parsers' count modes).
  Result<api::ConversationRequest> parse_conversation(Protocol p, std::string_view body,
                                                      bool count_only) const;
  // A conversation's prompt: rendered (V4.1) and encoded, control tokens only as ids.
  Result<std::vector<int32_t>> prompt_ids(const api::ConversationRequest& c) const {
    auto rendered = api::render_api(c, api::PromptFormat::kV41);
    if (!rendered.is_ok()) return rendered.status();
    return encoder.encode(*rendered);
  }
  Reply route(Protocol p, const Request& req);
  Reply count_tokens(Protocol p, const Request& req);
  Reply tokenize(const Request& req);
  Reply detokenize(const Request& req);
  Reply completions(const Request& req);
  const char* role_name() const;
  Reply generate(const Request& req);
  std::string metrics_text();
  Response health();
};

namespace {

engine::GenerationRequest generation(const api::SamplingParams& s, std::vector<int32_t> ids,
                                     const ServerOptions& opt, int64_t context_length) {
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
  g.ignore_eos = s.ignore_eos;
  // A stable hash (the KV store shares keys between processes and machines; a router computes
  // the same block keys), never 0.
  g.cache_salt = kv::tenant_salt(s.cache_salt);
  // Default and cap: what the context leaves after the prompt.
  const int64_t room = std::max<int64_t>(1, context_length - int64_t(g.prompt.size()));
  const int64_t fallback = opt.default_max_tokens > 0 ? opt.default_max_tokens : room;
  g.max_tokens = std::min(s.max_tokens.value_or(fallback), room);
  return g;
}

// An engine event's log probabilities in the API's terms: each token's bytes and those of its
// alternatives. Control tokens (EOS, </think>, DSML markers) are not content: left out.
std::vector<api::TokenLogprob> api_logprobs(const Tokenizer& tok, const engine::StreamEvent& ev) {
  std::vector<api::TokenLogprob> out;
  for (const engine::TokenLogprob& l : ev.logprobs) {
    if (tok.is_special(l.token)) continue;
    api::TokenLogprob a;
    a.token = std::string(tok.token_bytes(l.token));
    a.logprob = l.logprob;
    for (int32_t i = 0; i < l.top_count; ++i)
      a.top.emplace_back(std::string(tok.token_bytes(l.top[size_t(i)].first)),
                         l.top[size_t(i)].second);
    out.push_back(std::move(a));
  }
  return out;
}

// An engine event's log probabilities by id (Fathom's logprob_ids: a router renders them).
std::vector<api::IdLogprob> id_logprobs(const engine::StreamEvent& ev) {
  std::vector<api::IdLogprob> out(ev.logprobs.size());
  for (size_t k = 0; k < ev.logprobs.size(); ++k) {
    const engine::TokenLogprob& l = ev.logprobs[k];
    out[k].id = l.token;
    out[k].logprob = l.logprob;
    out[k].top.assign(l.top.begin(), l.top.begin() + l.top_count);
  }
  return out;
}

// Whether an engine event ends its request without an answer: an error, or a cancellation.
// A client reads a cancellation only when the server cancelled the request (the drain
// deadline, the engine's shutdown): one that left reads nothing, and a choice a stop sequence
// ended is done before its cancellation arrives. Either is an error to the client, never a
// finish_reason.
bool ends_in_failure(const engine::StreamEvent& ev) {
  return ev.finished &&
         (ev.cause == engine::FinishCause::kError || ev.cause == engine::FinishCause::kCancelled);
}

// The error such an event reports (never ok: an error event without a Status is internal).
Status event_error(const engine::StreamEvent& ev) {
  if (!ev.error.is_ok()) return ev.error;
  if (ev.cause == engine::FinishCause::kCancelled)
    return cancelled("the request was cancelled before it finished: the server is shutting down");
  return Status(StatusCode::kInternal, "the engine failed the request");
}

// Base of the generation producers: the engine streams of a response's choices, woken through
// their wakers, cancelled when the producer goes (a client that left, a reply dropped at
// shutdown). An error before the response produced anything answers as an HTTP error in the
// protocol's shape (the transport has sent nothing yet); after that, as the protocol's error
// event in the stream.
class StreamsProducer : public http::Producer {
 public:
  StreamsProducer(Server::Impl* im, Protocol p,
                  std::vector<std::shared_ptr<engine::RequestStream>> s, bool streaming,
                  Clock::time_point t0)
      : im_(im), protocol_(p), streams_(std::move(s)), streaming_(streaming), t0_(t0) {}
  ~StreamsProducer() override {
    for (auto& s : streams_) {
      s->set_waker(nullptr);
      s->cancel();
    }
  }
  void start(std::function<void()> wake) override {
    for (auto& s : streams_) s->set_waker(wake);
  }
  void cancel() override {
    for (auto& s : streams_) s->cancel();
  }
  void committed() override { sent_ = true; }

 protected:
  // Ends the reply on `error` (counted once): a whole HTTP error when nothing was sent and no
  // token came before it, or the reply is not streamed; else `stream_error()`, the protocol's
  // error event, appended to the stream. Returns true (the reply is complete).
  template <typename StreamError>
  bool end_with_error(const Status& error, bool produced, Response* out, StreamError stream_error) {
    cancel();
    if ((!sent_ && !produced) || !streaming_) {
      *out = im_->error_response(protocol_, error);
      return true;
    }
    im_->count_error(protocol_);
    out->body += stream_error();
    return true;
  }

  Server::Impl* im_;
  Protocol protocol_;
  std::vector<std::shared_ptr<engine::RequestStream>> streams_;
  bool streaming_;
  Clock::time_point t0_;
  bool sent_ = false;  // bytes went to the client
  double ttft_ = -1;
};

// Chat Completions, Responses or Messages: each choice's engine tokens through its output
// parser into its protocol responder (SSE events, or one JSON body at the end).
template <typename Responder>
class ConversationProducer : public StreamsProducer {
 public:
  struct Choice {
    prompt::OutputParser parser;
    Responder responder;
    bool reasoning = false;  // inside the thinking block
    int64_t tokens = 0, reasoning_tokens = 0;
    bool done = false;
  };

  ConversationProducer(Server::Impl* im, Protocol p,
                       std::vector<std::shared_ptr<engine::RequestStream>> s,
                       std::vector<Choice> choices, bool streaming, Clock::time_point t0)
      : StreamsProducer(im, p, std::move(s), streaming, t0), choices_(std::move(choices)) {}

  bool poll(Response* out) override {
    engine::StreamEvent ev;
    std::vector<prompt::ParserEvent> events;
    Status error;
    bool produced = false;  // tokens came in this call
    for (size_t i = 0; i < choices_.size() && error.is_ok(); ++i) {
      Choice& c = choices_[i];
      while (!c.done && error.is_ok() && streams_[i]->try_next(&ev)) {
        events.clear();
        usage_.prompt_tokens = ev.prompt_tokens;
        usage_.cached_tokens = ev.cached_tokens;
        if (ev.first_token_seconds > 0 && ttft_ < 0) ttft_ = ev.first_token_seconds;
        // Token by token: a stop sequence may end the output inside an event of several
        // tokens (a speculative step); what follows it is neither counted nor reported.
        size_t used = 0;
        for (int32_t t : ev.tokens) {
          if (c.parser.finished() || !error.is_ok()) break;
          ++used;
          ++c.tokens;
          if (c.reasoning) {
            ++c.reasoning_tokens;
            c.reasoning = t != im_->think_end;
          }
          if (Status st = c.parser.push(t, events); !st.is_ok())
            error = Status(StatusCode::kInternal,
                           "the model's output could not be parsed: " + st.message());
        }
        if (ev.logprobs.size() > used) ev.logprobs.resize(used);
        produced |= !ev.tokens.empty();
        if (ends_in_failure(ev)) error = event_error(ev);
        if (!error.is_ok()) break;
        if (ev.finished && !c.parser.finished()) {
          c.parser.finish(ev.cause == engine::FinishCause::kLength
                              ? prompt::FinishReason::kLength
                              : prompt::FinishReason::kEndOfStream,
                          events);
        }
        if (c.parser.finished()) {
          c.done = true;
          streams_[i]->cancel();  // a stop sequence ends generation early
        }
        total_usage();
        const std::vector<api::TokenLogprob> lps =
            ev.logprobs.empty() ? std::vector<api::TokenLogprob>() : api_logprobs(im_->tok, ev);
        if constexpr (std::is_same_v<Responder, api::ChatResponder>)
          c.responder.set_usage(
              {usage_.prompt_tokens, c.tokens, usage_.cached_tokens, c.reasoning_tokens});
        if (streaming_)
          out->body += stream(c.responder, events, lps);
        else
          add(c.responder, events, lps);
      }
    }
    if (!error.is_ok())
      return end_with_error(error, produced, out,
                            [&] { return stream_error(choices_.front().responder, error); });
    sent_ |= !out->body.empty();
    for (const Choice& c : choices_)
      if (!c.done) return false;
    im_->finish_metrics(t0_, ttft_);
    total_usage();
    if (streaming_) {
      out->body += tail();
    } else {
      *out = Response::json(200, complete());
    }
    return true;
  }

 private:
  void total_usage() {
    usage_.completion_tokens = usage_.reasoning_tokens = 0;
    for (const Choice& c : choices_) {
      usage_.completion_tokens += c.tokens;
      usage_.reasoning_tokens += c.reasoning_tokens;
    }
  }
  std::string stream(Responder& r, const std::vector<prompt::ParserEvent>& events,
                     const std::vector<api::TokenLogprob>& lps) {
    if constexpr (std::is_same_v<Responder, api::ChatResponder>)
      return r.stream(events, usage_, lps);
    else
      return r.stream(events, usage_);
  }
  void add(Responder& r, const std::vector<prompt::ParserEvent>& events,
           const std::vector<api::TokenLogprob>& lps) {
    if constexpr (std::is_same_v<Responder, api::ChatResponder>)
      r.add(events, lps);
    else
      r.add(events);
  }
  std::string stream_error(Responder& r, const Status& s) {
    if constexpr (std::is_same_v<Responder, api::ResponsesResponder>)
      return r.stream_error(s, usage_);
    else
      return r.stream_error(s);
  }
  // After the last choice finished: Chat with n > 1 sends one usage chunk and [DONE] (with
  // n == 1 the responder sent them with its finish).
  std::string tail() {
    if constexpr (std::is_same_v<Responder, api::ChatResponder>) {
      if (choices_.size() > 1) return choices_.front().responder.stream_tail(usage_);
    }
    return {};
  }
  std::string complete() {
    if constexpr (std::is_same_v<Responder, api::ChatResponder>) {
      std::vector<api::ChatResponder> rs;
      for (Choice& c : choices_) rs.push_back(std::move(c.responder));
      return api::chat_completion_json(rs, usage_);
    } else {
      return choices_.front().responder.complete(usage_);
    }
  }

  std::vector<Choice> choices_;
  api::Usage usage_;
};

// A resumed output's ids (resume_output_ids) taken by a choice's decoder and stop strings as
// text already produced, and dropped: the text that follows continues its characters and its
// stop strings as in the uninterrupted answer (what they held back comes out with it). True
// when the ids hold a stop string (not one that ends within the first `min_tokens` ids).
bool take_resumed(StreamDecoder& dec, api::StopMatcher& stop, std::span<const int32_t> ids,
                  int32_t eos, int64_t min_tokens) {
  std::string piece, sent;
  for (size_t i = 0; i < ids.size(); ++i) {
    piece.clear();
    if (ids[i] != eos) (void)dec.push(ids[i], piece);  // ids are checked by the engine
    if (stop.push(piece, &sent, int64_t(i) + 1 > min_tokens)) return true;
  }
  return false;
}

// OpenAI (legacy) Completions: each choice's continuation decoded as text, stop strings
// applied, as `text_completion` chunks (SSE) or one JSON body.
class CompletionProducer : public StreamsProducer {
 public:
  struct Choice {
    Choice(const Tokenizer& tok, bool skip_special, std::vector<std::string> stops,
           bool include_stop, api::CompletionsResponder r, bool ids)
        : dec(tok, skip_special),
          stop(std::move(stops), include_stop),
          responder(std::move(r)),
          logprob_ids(ids) {}
    StreamDecoder dec;
    api::StopMatcher stop;
    api::CompletionsResponder responder;
    bool logprob_ids = false;  // Fathom's logprob_ids (id level) instead of the text logprobs
    int64_t tokens = 0;
    // min_tokens less the resumed ids: the text of the first ones cannot end a stop string.
    int64_t unchecked = 0;
    std::string echo;  // the prompt's text, sent before the first text (OpenAI's echo)
    bool done = false;
  };

  CompletionProducer(Server::Impl* im, std::vector<std::shared_ptr<engine::RequestStream>> s,
                     std::vector<Choice> choices, bool streaming, Clock::time_point t0)
      : StreamsProducer(im, Protocol::kCompletions, std::move(s), streaming, t0),
        choices_(std::move(choices)) {}

  bool poll(Response* out) override {
    engine::StreamEvent ev;
    Status error;
    bool produced = false;
    for (size_t i = 0; i < choices_.size() && error.is_ok(); ++i) {
      Choice& c = choices_[i];
      while (!c.done && error.is_ok() && streams_[i]->try_next(&ev)) {
        std::string piece, text;
        usage_.prompt_tokens = ev.prompt_tokens;
        usage_.cached_tokens = ev.cached_tokens;
        if (ev.first_token_seconds > 0 && ttft_ < 0) ttft_ = ev.first_token_seconds;
        produced |= !ev.tokens.empty();
        if (ends_in_failure(ev)) {
          error = event_error(ev);
          break;
        }
        // Token by token: a stop string may end the text inside an event of several tokens
        // (a speculative step); the tokens after it are neither counted nor returned.
        bool stopped = false;
        size_t used = 0;
        for (int32_t t : ev.tokens) {
          ++used;
          ++c.tokens;
          piece.clear();
          if (t != im_->eos) (void)c.dec.push(t, piece);  // ids are checked by the engine
          if (c.stop.push(piece, &text, c.tokens > c.unchecked)) {
            stopped = true;
            break;
          }
        }
        if (!stopped && ev.finished) {
          piece.clear();
          c.dec.finish(piece);
          stopped = c.stop.push(piece, &text, c.tokens > c.unchecked);
          if (!stopped) c.stop.finish(&text);
        }
        ev.tokens.resize(used);
        if (ev.logprobs.size() > used) ev.logprobs.resize(used);
        c.responder.add_token_ids(ev.tokens);
        if (c.logprob_ids && !ev.logprobs.empty()) c.responder.add_logprob_ids(id_logprobs(ev));
        bool finished = ev.finished || stopped;
        prompt::FinishReason reason = ev.cause == engine::FinishCause::kLength && !stopped
                                          ? prompt::FinishReason::kLength
                                          : prompt::FinishReason::kStop;
        if (stopped) streams_[i]->cancel();  // the engine stops at its next step
        const std::vector<api::TokenLogprob> lps = ev.logprobs.empty() || c.logprob_ids
                                                       ? std::vector<api::TokenLogprob>()
                                                       : api_logprobs(im_->tok, ev);
        total_usage();
        c.responder.set_usage({usage_.prompt_tokens, c.tokens, usage_.cached_tokens, 0});
        if (!c.echo.empty()) {
          text.insert(0, c.echo);
          c.echo.clear();
        }
        if (streaming_) {
          out->body += c.responder.stream(text, lps);
          if (finished) out->body += c.responder.stream_finish(reason, usage_);
        } else {
          c.responder.add(text, lps);
          if (finished) c.responder.finish(reason);
        }
        c.done = finished;
      }
    }
    if (!error.is_ok())
      return end_with_error(error, produced, out,
                            [&] { return choices_.front().responder.stream_error(error); });
    sent_ |= !out->body.empty();
    for (const Choice& c : choices_)
      if (!c.done) return false;
    im_->finish_metrics(t0_, ttft_);
    total_usage();
    if (streaming_) {
      if (choices_.size() > 1) out->body += choices_.front().responder.stream_tail(usage_);
    } else {
      std::vector<api::CompletionsResponder> rs;
      for (Choice& c : choices_) rs.push_back(std::move(c.responder));
      *out = Response::json(200, api::completion_json(rs, usage_));
    }
    return true;
  }

 private:
  void total_usage() {
    usage_.completion_tokens = 0;
    for (const Choice& c : choices_) usage_.completion_tokens += c.tokens;
  }

  std::vector<Choice> choices_;
  api::Usage usage_;
};

// SGLang's /generate: the one choice's tokens decoded as text (stop strings and stop token ids
// applied), as SGLang's default stream (each event carries the text and output ids so far) or
// one JSON object.
class GenerateProducer : public StreamsProducer {
 public:
  GenerateProducer(Server::Impl* im, std::vector<std::shared_ptr<engine::RequestStream>> s,
                   std::string id, bool skip_special, std::vector<std::string> stops,
                   int64_t max_tokens, int64_t min_tokens, bool streaming, Clock::time_point t0)
      : StreamsProducer(im, Protocol::kGenerate, std::move(s), streaming, t0),
        id_(std::move(id)),
        dec_(im->tok, skip_special),
        stop_(std::move(stops)),
        max_tokens_(max_tokens),
        min_tokens_(min_tokens) {}

  bool poll(Response* out) override {
    engine::StreamEvent ev;
    Status error;
    bool produced = false;
    while (!done_ && streams_.front()->try_next(&ev)) {
      usage_.prompt_tokens = ev.prompt_tokens;
      usage_.cached_tokens = ev.cached_tokens;
      if (ev.first_token_seconds > 0 && ttft_ < 0) ttft_ = ev.first_token_seconds;
      produced |= !ev.tokens.empty();
      if (ends_in_failure(ev)) {
        error = event_error(ev);
        break;
      }
      // A stop token (EOS or one of stop_token_ids) ends the output ids but, as SGLang trims
      // it, not the text.
      const bool by_token = ev.finished && (ev.cause == engine::FinishCause::kEos ||
                                            ev.cause == engine::FinishCause::kStopToken);
      bool stopped = false;
      std::string piece;
      for (size_t k = 0; k < ev.tokens.size(); ++k) {
        const int32_t t = ev.tokens[k];
        ids_.push_back(t);
        if (by_token && k + 1 == ev.tokens.size()) {
          finish_.kind = api::GenerateFinish::Kind::kStopToken;
          finish_.token = t;
          break;
        }
        piece.clear();
        (void)dec_.push(t, piece);  // ids are checked by the engine
        if (stop_.push(piece, &text_, int64_t(ids_.size()) > min_tokens_)) {
          stopped = true;
          finish_.kind = api::GenerateFinish::Kind::kStopString;
          finish_.text = stop_.matched();
          break;
        }
      }
      if (!stopped && ev.finished) {
        piece.clear();
        dec_.finish(piece);
        if (stop_.push(piece, &text_, int64_t(ids_.size()) > min_tokens_)) {
          stopped = true;
          finish_.kind = api::GenerateFinish::Kind::kStopString;
          finish_.text = stop_.matched();
        } else {
          stop_.finish(&text_);
        }
      }
      if (stopped) streams_.front()->cancel();  // the engine stops at its next step
      if (ev.finished && finish_.kind == api::GenerateFinish::Kind::kNone) {
        finish_.kind = api::GenerateFinish::Kind::kLength;
        finish_.length = max_tokens_;
      }
      usage_.completion_tokens = int64_t(ids_.size());
      done_ = ev.finished || stopped;
      if (streaming_ && (!ev.tokens.empty() || done_)) out->body += event();
    }
    if (!error.is_ok())
      return end_with_error(error, produced, out, [&] { return api::sglang_stream_error(error); });
    sent_ |= !out->body.empty();
    if (!done_) return false;
    im_->finish_metrics(t0_, ttft_);
    if (streaming_)
      out->body += "data: [DONE]\n\n";
    else
      *out = Response::json(200, json());
    return true;
  }

 private:
  std::string json() const {
    return api::generate_output_json(text_, ids_, id_, finish_, usage_,
                                     std::chrono::duration<double>(Clock::now() - t0_).count());
  }
  std::string event() const { return "data: " + json() + "\n\n"; }

  std::string id_;
  StreamDecoder dec_;
  api::StopMatcher stop_;
  int64_t max_tokens_;
  int64_t min_tokens_;        // SGLang's min_new_tokens: no stop string ends within them
  std::string text_;          // sent so far (stop strings held back and trimmed)
  std::vector<int32_t> ids_;  // generated so far, the stop token included
  api::GenerateFinish finish_;
  api::GenerateUsage usage_;
  bool done_ = false;
};

}  // namespace

Result<api::ConversationRequest> Server::Impl::parse_conversation(Protocol p, std::string_view body,
                                                                  bool count_only) const {
  // A count's body takes only the count's fields (the parsers ignore caller_fields then).
  const std::span<const std::string_view> hooks =
      count_only ? std::span<const std::string_view>() : test_hook_fields(opt);
  // The options every protocol's parser shares.
  auto with_common = [&](auto o) {
    o.caller_fields = hooks;
    o.max_body_bytes = opt.max_body_bytes;
    o.models = &served;
    return o;
  };
  if (p == Protocol::kChat) return api::parse_chat_request(body, with_common(api::ChatOptions{}));
  if (p == Protocol::kMessages) {
    api::MessagesOptions o = with_common(api::MessagesOptions{});
    o.count_tokens = count_only;
    return api::parse_messages_request(body, o);
  }
  api::ResponsesOptions o = with_common(api::ResponsesOptions{});
  o.input_tokens = count_only;
  return api::parse_responses_request(body, o);
}

Reply Server::Impl::route(Protocol p, const Request& req) {
  const auto t0 = Clock::now();
  if (auto r = admit(p, req)) return std::move(*r);
  Result<api::ConversationRequest> conv = parse_conversation(p, req.body, false);
  if (!conv.is_ok()) return send_error(p, conv.status());
  auto ids = prompt_ids(*conv);
  if (!ids.is_ok()) return send_error(p, ids.status());
  const int64_t context = engine.context_length();
  if (Status st = truncate_prompt(*ids, conv->sampling.truncate_prompt_tokens, context);
      !st.is_ok())
    return send_error(p, st);
  if (Status st = check_prompt(ids->size(), context); !st.is_ok()) return send_error(p, st);
  auto g = generation(conv->sampling, std::move(*ids), opt, context);
  if (Status st = apply_logit_controls(conv->sampling, tok, &g); !st.is_ok())
    return send_error(p, st);
  if (Status hs = read_test_hooks(req.body, opt, &g); !hs.is_ok()) return send_error(p, hs);
  auto retention = retention_of(p, conv->sampling, req);
  if (!retention.is_ok()) return send_error(p, retention.status());
  g.retention = *retention;
  g.forwarded_for = opt.trusted_proxies.forward(req.peer, forwarded_for_of(req.headers));
  g.top_logprobs = conv->logprobs ? conv->top_logprobs : -1;
  if (conv->thinking && conv->reasoning_budget >= 0 && think_end >= 0) {
    g.reasoning_budget = conv->reasoning_budget;
    g.think_end_id = think_end;
  }
  auto constraint = constraint_of(conv->structured);
  if (!constraint.is_ok()) return send_error(p, constraint.status());
  auto tool_constraint = tools_constraint_of(*conv);
  if (!tool_constraint.is_ok()) return send_error(p, tool_constraint.status());
  if (tool_constraint->spec) {
    if (constraint->spec)
      return send_error(p, invalid_argument("'tools': strict tools together with a structured "
                                            "output (" +
                                            conv->structured.field + ") are not supported"));
    constraint = std::move(tool_constraint);
  }
  const std::string model = conv->model.empty() ? served.front().name : conv->model;
  const int64_t created = int64_t(std::time(nullptr));
  const std::string id = random_id(p == Protocol::kChat ? "chatcmpl-" : "");
  // The reasoning is free; the answer after </think> follows the constraint.
  if (constraint->spec && conv->thinking && think_end >= 0) {
    g.grammar_after_think = true;
    g.think_end_id = think_end;
  }
  const bool streaming = conv->stream;
  auto request = std::make_shared<api::ConversationRequest>(std::move(*conv));
  auto gen = std::make_shared<engine::GenerationRequest>(std::move(g));
  Submit submit = [this, p, t0, request, gen, model, created,
                   id]() -> Result<std::unique_ptr<http::Producer>> {
    const api::ConversationRequest& c = *request;
    const int n = std::max(1, c.n);
    auto streams = engine.submit_n(std::move(*gen), n);
    if (!streams.is_ok()) return streams.status();
    auto make = [&](auto responder_of) -> Result<std::unique_ptr<http::Producer>> {
      using R = decltype(responder_of(0));
      std::vector<typename ConversationProducer<R>::Choice> choices;
      for (int i = 0; i < n; ++i) {
        auto parser = prompt::OutputParser::create(tok, c.parsing_options());
        if (!parser.is_ok()) return parser.status();
        choices.push_back({std::move(*parser), responder_of(i), c.thinking});
      }
      return std::unique_ptr<http::Producer>(std::make_unique<ConversationProducer<R>>(
          this, p, std::move(*streams), std::move(choices), c.stream, t0));
    };
    if (p == Protocol::kChat)
      return make([&](int i) {
        return api::ChatResponder(id, model, created, c.thinking, c.include_usage,
                                  api::ChatChoice{i, n, c.logprobs, c.continuous_usage});
      });
    if (p == Protocol::kMessages)
      return make([&](int) { return api::MessagesResponder(id, model, c.thinking); });
    return make([&](int) { return api::ResponsesResponder(id, model, created); });
  };
  auto stream_error = [p, id, model, created](const Status& s) {
    if (p == Protocol::kMessages) return api::anthropic_stream_error(s);
    if (p == Protocol::kResponses)
      return api::ResponsesResponder(id, model, created).stream_error(s, api::Usage{});
    return api::openai_stream_error(s);
  };
  return with_constraint(req, p, streaming, std::move(*constraint), std::move(gen),
                         std::move(submit), stream_error);
}

// POST /v1/messages/count_tokens (Anthropic) and POST /v1/responses/input_tokens (OpenAI): the
// prompt a generation request with these fields would have, rendered and encoded as route()
// does, counted (what that request's usage would report as its input tokens, cached or not).
// Not counted as a request of the protocol in /metrics.
Reply Server::Impl::count_tokens(Protocol p, const Request& req) {
  if (auto r = unauthorized(p, req)) return std::move(*r);
  Result<api::ConversationRequest> conv = parse_conversation(p, req.body, true);
  if (!conv.is_ok()) return error_reply(p, conv.status());
  auto ids = prompt_ids(*conv);
  if (!ids.is_ok()) return error_reply(p, ids.status());
  const std::string n = std::to_string(ids->size());
  return Reply::of(Response::json(
      200, p == Protocol::kMessages
               ? "{\"input_tokens\":" + n + "}"
               : "{\"object\":\"response.input_tokens\",\"input_tokens\":" + n + "}"));
}

// vLLM's POST /tokenize: a prompt's ids (added tokens matched, the post-processor's template
// when add_special_tokens), or a conversation's as a Chat Completions request renders it.
Reply Server::Impl::tokenize(const Request& req) {
  const Protocol p = Protocol::kCompletions;
  if (auto r = unauthorized(p, req)) return std::move(*r);
  api::ChatOptions o;
  o.max_body_bytes = opt.max_body_bytes;
  o.models = &served;
  auto tr = api::parse_tokenize_request(req.body, o);
  if (!tr.is_ok()) return error_reply(p, tr.status());
  auto ids = tr->chat ? prompt_ids(*tr->chat)
                      : tok.encode(tr->prompt, {.add_special_tokens = tr->add_special_tokens});
  if (!ids.is_ok()) return error_reply(p, ids.status());
  std::vector<std::string_view> strs;
  if (tr->return_token_strs)
    for (int32_t id : *ids) strs.push_back(tok.spelling(id));
  return Reply::of(
      Response::json(200, api::tokenize_response_json(*ids, engine.context_length(),
                                                      tr->return_token_strs ? &strs : nullptr)));
}

// vLLM's POST /detokenize: the ids' text (HF's ByteLevel decoding).
Reply Server::Impl::detokenize(const Request& req) {
  const Protocol p = Protocol::kCompletions;
  if (auto r = unauthorized(p, req)) return std::move(*r);
  api::ChatOptions o;
  o.max_body_bytes = opt.max_body_bytes;
  o.models = &served;
  auto ids = api::parse_detokenize_request(req.body, o);
  Result<std::string> text = ids.is_ok() ? tok.decode(*ids) : Result<std::string>(ids.status());
  if (!text.is_ok()) return error_reply(p, text.status());
  return Reply::of(Response::json(200, "{\"prompt\":" + quote(*text) + "}"));
}

// OpenAI (legacy) Completions: `prompt` is a string or a list of token ids; the text is
// continued as is (no chat template).
Reply Server::Impl::completions(const Request& req) {
  const Protocol p = Protocol::kCompletions;
  const auto t0 = Clock::now();
  if (auto r = admit(p, req)) return std::move(*r);
  api::CompletionsOptions o;
  o.caller_fields = test_hook_fields(opt);
  o.max_body_bytes = opt.max_body_bytes;
  o.models = &served;
  auto cr = api::parse_completions_request(req.body, o);
  if (!cr.is_ok()) return send_error(p, cr.status());
  std::vector<int32_t> ids = cr->prompt_ids;
  if (!cr->prompt_is_ids) {
    auto e = tok.encode(cr->prompt_text);
    if (!e.is_ok()) return send_error(p, e.status());
    ids = std::move(*e);
  }
  if (ids.empty()) return send_error(p, invalid_argument("'prompt' is empty"));
  const int64_t context = engine.context_length();
  const int64_t prompt_length = int64_t(ids.size());  // before truncate_prompt_tokens
  if (Status st = truncate_prompt(ids, cr->sampling.truncate_prompt_tokens, context); !st.is_ok())
    return send_error(p, st);
  std::shared_ptr<const std::vector<int32_t>> prompt_ids;
  if (cr->return_token_ids) prompt_ids = std::make_shared<const std::vector<int32_t>>(ids);
  // OpenAI's echo: the prompt as given, else (ids, or cut by truncate_prompt_tokens) its ids'
  // text with special tokens written, as vLLM decodes it.
  auto echo = std::make_shared<std::string>();
  if (cr->echo && !cr->prompt_is_ids && int64_t(ids.size()) == prompt_length) {
    *echo = cr->prompt_text;
  } else if (cr->echo) {
    auto text = tok.decode(ids, false);
    if (!text.is_ok()) return send_error(p, text.status());
    *echo = std::move(*text);
  }
  const size_t resumed = cr->resume_output_ids.size();
  if (Status st = check_prompt(ids.size() + resumed, context); !st.is_ok())
    return send_error(p, st);
  auto g = generation(cr->sampling, std::move(ids), opt, context);
  if (Status st = apply_logit_controls(cr->sampling, tok, &g); !st.is_ok())
    return send_error(p, st);
  if (resumed > 0) {
    // max_tokens covers the resumed output too; the context caps the whole.
    if (int64_t(resumed) >= g.max_tokens)
      return send_error(p, invalid_argument("'resume_output_ids' leaves no room under max_tokens"));
    // An output that already ended (EOS, a stop token id) has nothing to continue.
    for (const int32_t t : cr->resume_output_ids) {
      const auto& stops = cr->stop_token_ids;
      if ((t == eos && !cr->sampling.ignore_eos) ||
          std::find(stops.begin(), stops.end(), t) != stops.end())
        return send_error(p,
                          invalid_argument("'resume_output_ids' holds token " + std::to_string(t) +
                                           ", which ends the output: nothing follows it"));
    }
    // Its text is the answer's so far: one that holds a stop string has ended.
    StreamDecoder dec(tok, cr->skip_special_tokens);
    api::StopMatcher stop(cr->sampling.stop);
    if (take_resumed(dec, stop, cr->resume_output_ids, eos, cr->sampling.min_tokens))
      return send_error(p, invalid_argument("'resume_output_ids' holds the stop string \"" +
                                            stop.matched() + "\": nothing follows it"));
    g.resume_output = std::move(cr->resume_output_ids);
  }
  // Which choice of an n-sample run a single seeded request draws as (n = 1 only: submit_n
  // numbers the choices of n > 1 itself).
  g.sample_index = cr->sample_index;
  if (Status hs = read_test_hooks(req.body, opt, &g); !hs.is_ok()) return send_error(p, hs);
  auto retention = retention_of(p, cr->sampling, req);
  if (!retention.is_ok()) return send_error(p, retention.status());
  g.retention = *retention;
  g.forwarded_for = opt.trusted_proxies.forward(req.peer, forwarded_for_of(req.headers));
  g.top_logprobs = cr->logprobs ? *cr->logprobs : cr->logprob_ids;
  g.stop_ids = std::move(cr->stop_token_ids);
  // Fathom's id-level reasoning fields (what a router sends: README).
  g.think_end_id = cr->think_end_id;
  g.reasoning_budget = cr->reasoning_budget;
  g.grammar_after_think = cr->grammar_after_think;
  // A P/D hand-off's request (from the router): its prompt blocks were pushed into a room
  // here; past the gate the engine reads them from the staging tier as from the KV store.
  if (const std::string_view room = req.header("X-Fathom-KV-Room"); !room.empty()) {
    if (opt.pd == nullptr || opt.pd->role() != PdRole::kDecode)
      return send_error(p, invalid_argument("X-Fathom-KV-Room: this replica does not decode "
                                            "hand-offs (--role decode)"));
    if (Status st = opt.pd->admit_room(room); !st.is_ok()) {
      std::string b = "{\"error\":{\"message\":";
      json::append_string(b, st.message());
      b += ",\"type\":\"server_error\",\"param\":null,\"code\":\"kv_transfer_failed\"}}";
      return Reply::of(Response::json(503, std::move(b)));
    }
  }
  auto constraint = constraint_of(cr->structured);
  if (!constraint.is_ok()) return send_error(p, constraint.status());
  const bool streaming = cr->stream;
  auto request = std::make_shared<api::CompletionsRequest>(std::move(*cr));
  auto gen = std::make_shared<engine::GenerationRequest>(std::move(g));
  Submit submit = [this, t0, request, gen, prompt_ids,
                   echo]() -> Result<std::unique_ptr<http::Producer>> {
    const api::CompletionsRequest& c = *request;
    const int n = std::max(1, c.n);
    const std::vector<int32_t> resumed_ids = gen->resume_output;  // n = 1
    auto streams = engine.submit_n(std::move(*gen), n);
    if (!streams.is_ok()) return streams.status();
    const std::string id = random_id("cmpl-");
    const std::string& model = c.model.empty() ? served.front().name : c.model;
    const int64_t created = int64_t(std::time(nullptr));
    std::vector<CompletionProducer::Choice> choices;
    for (int i = 0; i < n; ++i)
      choices.emplace_back(tok, c.skip_special_tokens, c.sampling.stop, c.sampling.include_stop_str,
                           api::CompletionsResponder(
                               id, model, created,
                               api::CompletionsChoice{i, n, c.logprobs.has_value(), c.include_usage,
                                                      c.return_token_ids, c.logprob_ids >= 0,
                                                      prompt_ids, c.continuous_usage}),
                           c.logprob_ids >= 0);
    for (CompletionProducer::Choice& ch : choices) {
      ch.unchecked = c.sampling.min_tokens - int64_t(resumed_ids.size());
      ch.echo = *echo;
    }
    if (!resumed_ids.empty())
      (void)take_resumed(choices.front().dec, choices.front().stop, resumed_ids, eos,
                         c.sampling.min_tokens);
    return std::unique_ptr<http::Producer>(std::make_unique<CompletionProducer>(
        this, std::move(*streams), std::move(choices), c.stream, t0));
  };
  return with_constraint(req, p, streaming, std::move(*constraint), std::move(gen),
                         std::move(submit),
                         [](const Status& s) { return api::openai_stream_error(s); });
}

// SGLang's native /generate: `text` (encoded with added-token matching, as /tokenize and a
// string prompt on /v1/completions) or `input_ids`, continued as is (no chat template).
Reply Server::Impl::generate(const Request& req) {
  const Protocol p = Protocol::kGenerate;
  const auto t0 = Clock::now();
  if (auto r = admit(p, req)) return std::move(*r);
  auto gr = api::parse_generate_request(req.body, opt.max_body_bytes);
  if (!gr.is_ok()) return send_error(p, gr.status());
  std::vector<int32_t> ids = std::move(gr->input_ids);
  if (!gr->prompt_is_ids) {
    auto e = tok.encode(gr->text);
    if (!e.is_ok()) return send_error(p, e.status());
    ids = std::move(*e);
  }
  if (ids.empty()) return send_error(p, invalid_argument("'text' is empty"));
  const int64_t context = engine.context_length();
  if (Status st = check_prompt(ids.size(), context); !st.is_ok()) return send_error(p, st);
  auto g = generation(gr->sampling, std::move(ids), opt, context);
  if (Status st = apply_logit_controls(gr->sampling, tok, &g); !st.is_ok())
    return send_error(p, st);
  g.stop_ids = gr->stop_token_ids;
  auto retention = retention_of(p, gr->sampling, req);
  if (!retention.is_ok()) return send_error(p, retention.status());
  g.retention = *retention;
  g.forwarded_for = opt.trusted_proxies.forward(req.peer, forwarded_for_of(req.headers));
  auto constraint = constraint_of(gr->structured);
  if (!constraint.is_ok()) return send_error(p, constraint.status());
  const bool streaming = gr->stream;
  auto request = std::make_shared<api::GenerateRequest>(std::move(*gr));
  auto gen = std::make_shared<engine::GenerationRequest>(std::move(g));
  Submit submit = [this, t0, request, gen]() -> Result<std::unique_ptr<http::Producer>> {
    const api::GenerateRequest& r = *request;
    const int64_t max_tokens = gen->max_tokens;
    auto streams = engine.submit_n(std::move(*gen), 1);
    if (!streams.is_ok()) return streams.status();
    std::string id = r.rid.empty() ? random_id("") : r.rid;
    return std::unique_ptr<http::Producer>(std::make_unique<GenerateProducer>(
        this, std::move(*streams), std::move(id), r.skip_special_tokens, r.sampling.stop,
        max_tokens, r.sampling.min_tokens, r.stream, t0));
  };
  return with_constraint(req, p, streaming, std::move(*constraint), std::move(gen),
                         std::move(submit),
                         [](const Status& s) { return api::sglang_stream_error(s); });
}

const char* Server::Impl::role_name() const {
  return opt.pd ? pd_role_name(opt.pd->role()) : "both";
}

Response Server::Impl::health() {
  const engine::Generator::Health h = engine.health();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", h.stalled_seconds);
  if (!h.alive || h.stalled_seconds > opt.health_stall_s) {
    return Response::json(503, std::string("{\"status\":\"unhealthy\",\"engine_alive\":") +
                                   (h.alive ? "true" : "false") +
                                   ",\"engine_stalled_seconds\":" + buf + "}");
  }
  return Response::json(200, std::string("{\"status\":\"ok\",\"engine_stalled_seconds\":") + buf +
                                 ",\"role\":\"" + role_name() + "\"}");
}

std::string Server::Impl::metrics_text() {
  std::ostringstream o;
  auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << v << "\n";
  };
  {
    std::lock_guard<std::mutex> lock(metrics.mu);
    o << "# HELP fathom_requests_total HTTP requests by endpoint\n# TYPE fathom_requests_total "
         "counter\n";
    for (int p = 0; p < kProtocols; ++p)
      o << "fathom_requests_total{endpoint=\"" << protocol_name(Protocol(p)) << "\"} "
        << metrics.requests[p] << "\n";
    o << "# HELP fathom_request_errors_total Failed requests by endpoint\n# TYPE "
         "fathom_request_errors_total counter\n";
    for (int p = 0; p < kProtocols; ++p)
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
  o << engine.metrics_text();
  if (opt.pd) o << opt.pd->metrics_text();
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
  gauge("fathom_http_stream_heartbeats_total", "Keep-alive comments sent on silent streams",
        double(h.stream_heartbeats), "counter");
  if (grammars) {
    gauge("fathom_grammar_cache_grammars", "Compiled grammars in the cache",
          double(grammars->size()));
    gauge("fathom_grammar_cache_bytes", "Bytes of the cached grammars' automata, masks and keys",
          double(grammars->bytes()));
    gauge("fathom_grammar_cache_hits_total", "Structured outputs served from the grammar cache",
          double(grammars->hits()), "counter");
    gauge("fathom_grammar_compiles_total", "Grammar compiles started", double(grammars->misses()),
          "counter");
    gauge("fathom_grammar_compiles_cancelled_total",
          "Grammar compiles stopped, or never started, because their client left",
          double(grammars->cancelled() + compiles->skipped()), "counter");
    gauge("fathom_grammar_compiles_waiting", "Grammar compiles queued behind others",
          double(compiles->waiting()));
    gauge("fathom_grammar_compiles_shared_total",
          "Structured-output requests that joined the compile of the same grammar under way",
          double(compiles->shared()), "counter");
  }
  return o.str();
}

Server::Server(engine::Generator& engine, const Tokenizer& tokenizer,
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
  h.route("POST", "/v1/messages/count_tokens",
          [im](const Request& q) { return im->count_tokens(Protocol::kMessages, q); });
  h.route("POST", "/v1/responses/input_tokens",
          [im](const Request& q) { return im->count_tokens(Protocol::kResponses, q); });
  h.route("POST", "/v1/completions", [im](const Request& q) { return im->completions(q); });
  h.route("POST", "/generate", [im](const Request& q) { return im->generate(q); });
  h.route(
      "GET", "/v1/models",
      [im](const Request& q) {
        if (auto r = im->unauthorized(Protocol::kCompletions, q)) return std::move(*r);
        return Reply::of(Response::json(
            200, api::models_list_json(im->served, im->started, im->engine.context_length())));
      },
      http::Dispatch::kInline);
  // GET /v1/models/{model} (OpenAI's retrieve) for each served name, as written and as a client
  // percent-encodes it (encodeURIComponent: a name with '/' arrives as %2F). Any other name
  // is the transport's 404.
  for (const api::ServedModel& m : im->served) {
    auto model = [im, m](const Request& q) {
      if (auto r = im->unauthorized(Protocol::kCompletions, q)) return std::move(*r);
      return Reply::of(
          Response::json(200, api::model_json(m, im->started, im->engine.context_length())));
    };
    h.route("GET", "/v1/models/" + m.name, model, http::Dispatch::kInline);
    if (const std::string e = percent_encoded(m.name); e != m.name)
      h.route("GET", "/v1/models/" + e, model, http::Dispatch::kInline);
  }
  // vLLM's /tokenize (a prompt with added-token matching, or a conversation) and /detokenize.
  h.route("POST", "/tokenize", [im](const Request& q) { return im->tokenize(q); });
  h.route("POST", "/detokenize", [im](const Request& q) { return im->detokenize(q); });
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
  h.route(
      "GET", "/v1/role",
      [im](const Request&) {
        return Reply::of(
            Response::json(200, std::string("{\"role\":\"") + im->role_name() + "\"}"));
      },
      http::Dispatch::kInline);
  if (im->opt.pd != nullptr)
    im->opt.pd->add_to(h, [im](const Request& q) {
      // --pd-api-key: only the router's and the prefill replicas' keys, never a client's.
      const ServerOptions& o = im->opt;
      return im->unauthorized(Protocol::kCompletions, q,
                              o.pd_api_keys.empty() ? o.api_keys : o.pd_api_keys);
    });
  if (im->opt.kv_events != nullptr) {
    im->kv_routes = std::make_unique<KvEventRoutes>(*im->opt.kv_events);
    im->kv_routes->add_to(
        h, [im](const Request& q) { return im->unauthorized(Protocol::kCompletions, q); });
  }
}

Server::~Server() { stop(); }

void Server::add_get_json(std::string path,
                          std::function<Result<std::string>(std::string_view query)> body) {
  Impl* im = impl_.get();
  im->http.route("GET", std::move(path), [im, body = std::move(body)](const Request& q) {
    if (auto r = im->unauthorized(Protocol::kCompletions, q)) return std::move(*r);
    const size_t at = q.target.find('?');
    const std::string_view query =
        at == std::string::npos ? std::string_view() : std::string_view(q.target).substr(at + 1);
    Result<std::string> out = body(query);
    if (!out.is_ok()) return im->error_reply(Protocol::kCompletions, out.status());
    return Reply::of(Response::json(200, std::move(*out)));
  });
}

Status Server::listen() { return impl_->http.listen(); }

void Server::run() { impl_->http.run(); }

void Server::stop() {
  if (!impl_) return;
  if (impl_->kv_routes) impl_->kv_routes->stop();  // followers' streams never end on their own
  impl_->http.stop();
}

int Server::port() const { return impl_->http.port(); }

}  // namespace fathom::serve
