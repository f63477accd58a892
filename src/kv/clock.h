// kv::Clock: the time source of the KV store's retention (an object expires at its last use
// plus its class's time to live). Wall time in milliseconds since the Unix epoch, because an
// expiry is persisted (the disk tier's file modification times) and must survive a restart;
// tests pass a TestClock and advance it instead of waiting.
//
// Implementations are thread-safe; a clock is owned by whoever builds the stores and must
// outlive them (system_clock() lives forever).
#pragma once

#include <atomic>
#include <cstdint>

namespace fathom::kv {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual int64_t now_ms() const = 0;
};

// The system's wall clock (CLOCK_REALTIME). One shared instance.
const Clock& system_clock();

// A clock that stands still until the test moves it. Thread-safe.
class TestClock final : public Clock {
 public:
  explicit TestClock(int64_t start_ms) : now_(start_ms) {}
  int64_t now_ms() const override { return now_.load(std::memory_order_relaxed); }
  void advance_ms(int64_t ms) { now_.fetch_add(ms, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace fathom::kv
