// CancelToken: a flag one party raises, once, to ask long-running work to stop early (a
// request whose client left, a server past its drain deadline). The work polls cancelled() at
// points where stopping is safe and then returns a kCancelled Status. Whoever raises it and
// whoever polls it share ownership (usually a shared_ptr). Thread-safe: cancel() and
// cancelled() may be called from any thread; polling is one relaxed atomic load.
#pragma once

#include <atomic>

namespace fathom {

class CancelToken {
 public:
  void cancel() { raised_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return raised_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> raised_{false};
};

// True when a token is given and raised (a null token is never raised).
inline bool is_cancelled(const CancelToken* token) {
  return token != nullptr && token->cancelled();
}

}  // namespace fathom
