#include "engine/grammar_masks.h"

#include <chrono>

namespace fathom::engine {

GrammarMaskWorker::GrammarMaskWorker() : thread_([this] { loop(); }) {}

GrammarMaskWorker::~GrammarMaskWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GrammarMaskWorker::start() {
  if (jobs_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = true;
  }
  cv_.notify_all();
}

double GrammarMaskWorker::wait() {
  if (jobs_.empty()) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !pending_; });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GrammarMaskWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || pending_; });
    if (stop_) return;
    lock.unlock();
    for (const Job& job : jobs_) run(job);
    lock.lock();
    pending_ = false;
    cv_.notify_all();
  }
}

void GrammarMaskWorker::run(const Job& job) {
  grammar::GrammarMatcher& m = *job.matcher;
  const size_t words = m.mask_words();
  const size_t most = job.drafts.size() - job.forced + 1;
  if (job.masks->size() < most * words) job.masks->resize(most * words);
  size_t rows = 0, accepted = 0;
  bool ok = true;
  while (accepted < job.forced && (ok = m.accept_token(job.drafts[accepted]))) ++accepted;
  while (ok && !m.is_terminated()) {
    m.fill_next_token_bitmask(job.masks->data() + rows * words);
    ++rows;
    if (rows == most || !m.accept_token(job.drafts[job.forced + rows - 1])) break;
    ++accepted;
  }
  if (accepted > 0) m.rollback(accepted);
  *job.rows = int64_t(rows);
}

}  // namespace fathom::engine
