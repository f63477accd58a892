// The HTTP server: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and OpenAI
// Completions (prompt text or token ids) over the engine, streaming with SSE through the
// prompt/API layer's parser (control tokens recognised by id) and event generators; plus
// SGLang's native /generate (token ids or text in, text and output ids out, no template),
// /v1/models, /tokenize, /detokenize, /health and /metrics (Prometheus text). API keys
// (Authorization: Bearer or x-api-key), body and token limits; a client's disconnect cancels
// its generation, streamed or not. The routes and protocols live here; the transport
// (connections, timeouts, SSE framing, draining) is http::HttpServer (http_server.h).
//
// A Server is built once; listen() then run() on one thread; stop() may be called from any
// thread (e.g. a signal watcher): run() returns once in-flight requests have finished, or
// were cancelled at `shutdown_timeout_s`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/retention.h"
#include "serve/forwarded_for.h"

namespace fathom {
class Tokenizer;
namespace engine {
class Generator;
}
namespace prompt {
class PromptEncoder;
}
namespace kv {
class KvEventLog;
}
}  // namespace fathom

namespace fathom::serve {

class PdRoutes;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  // The accepted API keys (Authorization: Bearer or x-api-key); none = no authentication.
  std::vector<std::string> api_keys;
  // With any, the only keys the P/D hand-off endpoints accept (else they take api_keys').
  std::vector<std::string> pd_api_keys;
  // The peers whose X-Forwarded-For names the client (--forwarded-allow-ips): who a request
  // is from, for sharing the grammar compiles fairly (none: the peer's address).
  TrustedProxies trusted_proxies;
  // The KV store's retention classes (--retention) and the default class of requests made
  // with a key (--api-key-retention KEY=CLASS; REQUIRES: KEY in api_keys, CLASS a class).
  kv::RetentionPolicy retention;
  std::vector<std::pair<std::string, std::string>> api_key_retention;
  // False where nothing downstream keeps retention classes (a router in front of vLLM or
  // SGLang): a request's `retention` is then a 400; Anthropic's cache_control stays a hint.
  bool retention_classes = true;
  // The names `model` may take (the first is the default); DeepSeek's deepseek-chat (thinking
  // off) and deepseek-reasoner (thinking on) are served beside them for the same weights.
  std::vector<std::string> model_names = {"deepseek-v4.1-flash"};
  size_t max_body_bytes = 32 << 20;
  // max_tokens when a request sets none; 0 = all that is left. The context length (the most
  // prompt + generated tokens of one request) is the generator's: a prompt must leave room
  // for one token, and max_tokens is capped at what is left.
  int64_t default_max_tokens = 0;
  // Testing aid: accept "forced_output_ids" in a request body (the generated tokens are
  // those ids, teacher-forced), e.g. to exercise tool calls with a random model.
  bool allow_forced_output = false;
  // Testing aid: accept "fathom_inject_error_after" (the engine fails the request after that
  // many tokens), to test how errors reach clients.
  bool allow_error_injection = false;
  // Transport (see http_server.h).
  double header_timeout_s = 10, body_timeout_s = 60, shutdown_timeout_s = 30;
  double stream_heartbeat_s = 15;  // an SSE comment on a stream silent this long; 0 = never
  int max_connections = 4096;
  int io_threads = 2, worker_threads = 2;
  // /health reports the engine unhealthy when it has work and no step ended for this long.
  double health_stall_s = 60;
  // The prefix cache's event feed (the engine's): served as GET /v1/kv_events and
  // GET /v1/kv_snapshot (serve/kv_event_routes.h). Null: those routes are 404. Not owned: it
  // must outlive the server.
  const kv::KvEventLog* kv_events = nullptr;
  // The P/D hand-off's routes and this replica's role (serve/pd_routes.h), reported in /health
  // and GET /v1/role; null: role "both", no hand-off routes. Not owned: it must outlive the
  // server.
  PdRoutes* pd = nullptr;
};

class Server {
 public:
  Server(engine::Generator& engine, const Tokenizer& tokenizer,
         const prompt::PromptEncoder& encoder, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the address; kIoError if it can not (e.g. the port is in use).
  Status listen();
  // Serves until stop() has drained. REQUIRES: listen() succeeded.
  void run();
  void stop();
  // The bound port (after listen()), for port 0.
  int port() const;
  // An extra GET route answering 200 with the JSON `body(query string)` gives (e.g. the router's
  // view of its index), or its error (a bad query: 400) in OpenAI's shape, behind the API keys.
  // REQUIRES: before listen().
  void add_get_json(std::string path,
                    std::function<Result<std::string>(std::string_view query)> body);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fathom::serve
