// KV capacity a decode replica holds for the P/D hand-offs it agreed to take (serving.md §3,
// decode first): when the router opens a room, D holds the pages the request will need (its
// prompt plus max_tokens) before P prefills, or refuses at once when it lacks them, so a
// hand-off is never pushed to a replica that then has no room to run it.
//
// A hold is accounting, not allocated pages: the engine's admission of any other request
// needs its pages on top of what is held for others (so new work cannot take them), and the
// admission of the request a hold is for — recognised by its prompt and tenant salt, the
// prompt the router sent to reserve — claims the hold, whose pages then come to it as its own
// allocations (released as any request's when it ends). A hold that is never claimed ends
// when its holder releases it (the room failed) or at its deadline (the room's lease).
// Limits, on purpose: holds do not preempt running sequences (their decode growth is met as
// before); an idle engine still admits its first request whatever is held (the engine's
// rule that the first always is, which keeps anything from waiting forever); a request with
// the same prompt and salt admitted first takes the hold (the held request is then admitted
// as any other); and the free pages a hold is checked against count the prefix cache's pages
// as free (they are evicted on demand, though some may be shared with running sequences).
//
// KvReserver is the interface the replica's P/D routes see (the Engine implements it).
// KvReservations: thread-safe (one mutex; every call sweeps expired holds first).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>

#include "core/status.h"

namespace fathom::engine {

class KvReservations {
 public:
  using Clock = std::chrono::steady_clock;

  // The key of a request: its prompt ids and tenant salt (GenerationRequest::cache_salt).
  static uint64_t key_of(std::span<const int32_t> prompt, uint64_t salt);

  // Holds `pages` for the request `key` until `until`: its id (> 0), or kResourceExhausted
  // when `pages` plus what is held already exceeds `free_pages` (what the pool could give
  // now, as the caller counts it).
  Result<uint64_t> hold(uint64_t key, int64_t pages, int64_t free_pages, Clock::time_point until);
  // Ends hold `id` (nothing when it was claimed or has expired).
  void release(uint64_t id);
  // Takes the oldest hold of `key` (the request is being admitted): its pages are no longer
  // held for it. The pages it held, 0 when there was none.
  int64_t claim(uint64_t key);
  // Pages held now, and held for requests other than `key`.
  int64_t held() const;
  int64_t held_except(uint64_t key) const;
  // True when nothing is held (a caller may then skip hashing the prompt).
  bool empty() const;

 private:
  struct Hold {
    uint64_t key = 0;
    int64_t pages = 0;
    Clock::time_point until;
  };
  void sweep_locked() const;

  mutable std::mutex mu_;
  mutable std::map<uint64_t, Hold> holds_;  // guarded by mu_; by id (oldest first)
  mutable int64_t held_ = 0;                // guarded by mu_: the sum of holds_' pages
  uint64_t next_id_ = 1;                    // guarded by mu_
};

// What a decode replica's P/D routes ask of the engine. Any thread.
class KvReserver {
 public:
  virtual ~KvReserver() = default;
  // Holds the KV pages of a request of `prompt` (tenant salt `salt`) generating up to
  // `max_tokens`, until `until`; kResourceExhausted (saying what it needs and has) when the
  // engine lacks them.
  virtual Result<uint64_t> reserve_kv(std::span<const int32_t> prompt, uint64_t salt,
                                      int64_t max_tokens,
                                      KvReservations::Clock::time_point until) = 0;
  virtual void release_kv(uint64_t id) = 0;
  // Pages held now.
  virtual int64_t reserved_kv_pages() const = 0;
};

}  // namespace fathom::engine
