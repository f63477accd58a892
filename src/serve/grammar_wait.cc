#include "serve/grammar_wait.h"

#include <mutex>
#include <optional>

#include "grammar/compile_queue.h"

namespace fathom::serve {

struct GrammarWaitProducer::Shared {
  std::shared_ptr<CancelToken> cancel = std::make_shared<CancelToken>();
  std::mutex mu;
  std::optional<Result<std::shared_ptr<const grammar::CompiledGrammar>>> result;  // guarded by mu
  std::function<void()> wake;                                                     // guarded by mu
};

GrammarWaitProducer::GrammarWaitProducer(grammar::CompileQueue& queue,
                                         std::shared_ptr<const grammar::PreparedGrammar> grammar,
                                         Hooks hooks, std::string client)
    : shared_(std::make_shared<Shared>()), hooks_(std::move(hooks)) {
  queue.submit(
      std::move(grammar), shared_->cancel,
      [shared = shared_](Result<std::shared_ptr<const grammar::CompiledGrammar>> r) {
        // Under the lock: the producer's destructor clears wake, and the transport that owns
        // it may be gone after that.
        std::lock_guard<std::mutex> lock(shared->mu);
        shared->result = std::move(r);
        if (shared->wake) shared->wake();
      },
      std::move(client));
}

GrammarWaitProducer::~GrammarWaitProducer() {
  shared_->cancel->cancel();
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->wake = nullptr;
}

void GrammarWaitProducer::start(std::function<void()> wake) {
  wake_ = wake;
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->wake = std::move(wake);
  if (shared_->result) wake_();  // compiled before the transport started polling
}

bool GrammarWaitProducer::poll(http::Response* out) {
  if (inner_) return inner_->poll(out);
  // Cancelled at the drain deadline: answer now, whatever the compile is doing.
  if (cancelled_)
    return fail(hooks_.compile_error(cancelled("grammar compilation cancelled")), out);
  std::optional<Result<std::shared_ptr<const grammar::CompiledGrammar>>> r;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (!shared_->result) return false;
    r = std::move(shared_->result);
  }
  if (!r->is_ok()) return fail(hooks_.compile_error(r->status()), out);
  auto producer = hooks_.finish(std::move(r->value()));
  if (!producer.is_ok()) return fail(producer.status(), out);
  inner_ = std::move(*producer);
  inner_->start(wake_);
  if (committed_) inner_->committed();
  return inner_->poll(out);
}

bool GrammarWaitProducer::fail(const Status& error, http::Response* out) {
  if (committed_)
    out->body += hooks_.stream_error(error);
  else
    *out = hooks_.error_response(error);
  return true;
}

void GrammarWaitProducer::cancel() {
  cancelled_ = true;
  shared_->cancel->cancel();
  if (inner_) inner_->cancel();
}

void GrammarWaitProducer::committed() {
  committed_ = true;
  if (inner_) inner_->committed();
}

}  // namespace fathom::serve
