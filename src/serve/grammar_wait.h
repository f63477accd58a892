// GrammarWaitProducer: the reply of a request whose grammar is not in the cache yet. It puts
// the compile on the server's CompileQueue and stands in for the real reply meanwhile, so the
// request worker that parsed the request is free at once (a large schema compiles for
// seconds). Once compiled, `finish` submits the request and builds the reply's producer, which
// it then forwards every call to. A compile that fails ends the reply: a whole error response
// while nothing was sent, or, once a heartbeat committed the stream, the protocol's error
// event. cancel() (the client left, the drain deadline) raises the compile's CancelToken, so
// a waiting compile is skipped and a running one stops, and the next poll() ends the reply
// (503, kCancelled) without waiting for the compile to notice.
// Called as every Producer is (on the connection's strand); the compile thread only stores
// the result and calls wake.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/cancel.h"
#include "core/status.h"
#include "serve/http_types.h"

namespace fathom::grammar {
class CompileQueue;
class CompiledGrammar;
struct PreparedGrammar;
}  // namespace fathom::grammar

namespace fathom::serve {

class GrammarWaitProducer : public http::Producer {
 public:
  using Finish = std::function<Result<std::unique_ptr<http::Producer>>(
      std::shared_ptr<const grammar::CompiledGrammar>)>;
  struct Hooks {
    Finish finish;                                       // with the compiled grammar
    std::function<Status(const Status&)> compile_error;  // the request's error for a failed compile
    std::function<http::Response(const Status&)> error_response;  // a whole error reply
    std::function<std::string(const Status&)> stream_error;       // the protocol's error event
  };

  // Submits the compile now, on behalf of `client` (see CompileQueue::submit).
  GrammarWaitProducer(grammar::CompileQueue& queue,
                      std::shared_ptr<const grammar::PreparedGrammar> grammar, Hooks hooks,
                      std::string client = {});
  ~GrammarWaitProducer() override;

  void start(std::function<void()> wake) override;
  bool poll(http::Response* out) override;
  void cancel() override;
  void committed() override;

 private:
  struct Shared;  // what the compile thread and the producer both touch
  // Ends the reply on `error`. Returns true.
  bool fail(const Status& error, http::Response* out);

  std::shared_ptr<Shared> shared_;
  Hooks hooks_;
  std::function<void()> wake_;
  std::unique_ptr<http::Producer> inner_;  // once compiled
  bool committed_ = false, cancelled_ = false;
};

}  // namespace fathom::serve
