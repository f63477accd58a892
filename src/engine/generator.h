// What the HTTP server needs of whatever generates tokens: submit a request (n samples of one
// prompt) and read its events, health, limits and metrics. engine::Engine is one (the model in
// this process); router::RemoteGenerator is another (replicas behind the router). The server
// renders, encodes, parses and streams exactly the same way over either.
//
// Every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/request.h"

namespace fathom::engine {

class Generator {
 public:
  virtual ~Generator() = default;

  // n samples of one prompt (1 <= n <= 128); element i is choice i (sample_index i). Errors
  // are the request's fault (kInvalidArgument, kUnsupported naming what is not supported) or
  // the generator's (kResourceExhausted, kIoError).
  virtual Result<std::vector<std::shared_ptr<RequestStream>>> submit_n(GenerationRequest request,
                                                                       int n) = 0;
  // The most prompt + generated tokens of one request.
  virtual int64_t context_length() const = 0;
  // The size of the logits row (a structured-output token table's vocabulary).
  virtual int64_t vocab_size() const = 0;

  struct Health {
    bool alive = false;          // it can serve (threads run; for a router: a replica is up)
    double stalled_seconds = 0;  // work pending and no progress for this long (else 0)
  };
  virtual Health health() const = 0;
  // Its own metrics in the Prometheus text format, appended to the server's /metrics.
  virtual std::string metrics_text() const = 0;
};

}  // namespace fathom::engine
