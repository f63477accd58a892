// The HTTP server: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and OpenAI
// Completions (prompt text or token ids) over the engine, streaming with SSE through the
// prompt/API layer's parser (control tokens recognised by id) and event generators; plus
// /v1/models, /health and /metrics (Prometheus text). API keys (Authorization: Bearer or
// x-api-key), body and token limits, client disconnect cancels generation.
//
// A Server is built once and run() on one thread; stop() may be called from any thread
// (e.g. a signal watcher) and makes run() return after in-flight requests end.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace fathom {
class Tokenizer;
namespace engine {
class Engine;
}
namespace prompt {
class PromptEncoder;
}
}  // namespace fathom

namespace fathom::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;  // empty = no authentication
  std::string model_name = "deepseek-v4.1-flash";
  size_t max_body_bytes = 32 << 20;
  int64_t max_prompt_tokens = 1 << 20;
  int64_t default_max_tokens = 4096;
  int64_t max_tokens_cap = 1 << 20;
  int threads = 64;  // HTTP worker threads (concurrent streams)
  // Testing aid: accept "forced_output_ids" in a request body (the generated tokens are
  // those ids, teacher-forced), e.g. to exercise tool calls with a random model.
  bool allow_forced_output = false;
};

class Server {
 public:
  Server(engine::Engine& engine, const Tokenizer& tokenizer, const prompt::PromptEncoder& encoder,
         ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and serves until stop(); kIoError if the address cannot be bound.
  Status run();
  void stop();
  // The bound port (after run() started listening), for port 0.
  int port() const { return port_.load(); }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<int> port_{0};
};

}  // namespace fathom::serve
