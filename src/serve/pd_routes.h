// The replica side of prefill/decode disaggregation (the router side is router/pd_client.h and
// RemoteGenerator). A replica runs in one role (`fathom serve --role`), reported in /health and
// GET /v1/role so a router learns roles from the replicas themselves:
//   - prefill (P): POST /v1/pd/prefill {room, prompt, cache_salt?, retention?, push_to} prefills
//     the prompt through the engine (its prefix cache and KV store as any request; one token
//     generated), which writes every prompt block it caches, and the window side objects at
//     the prompt's hit boundary, into the memory staging tier (kv/memory_store.h) as into any
//     store tier. Those objects are leased (pinned) from before the prefill until the push is
//     done or `lease_s` passes; then the block objects of blocks 1..w and the window side
//     object of block w (w: the deepest block of the hit boundary's chain that has one) are
//     pushed to D's room in kv/pd_wire.h frames, cut into chunks of push_chunk_bytes, one
//     POST /v1/kv_push each, in order (the next only after D accepted the last).
//   - decode (D): POST /v1/pd/reserve {room, prompt, cache_salt?, max_tokens?} opens a room:
//     D first holds the KV pages of prompt + max_tokens (256 when not stated) in its engine
//     (engine/kv_reservations.h: other admissions leave them free; the request's admission
//     takes them) or refuses with a 503, code kv_capacity, when it lacks them; the hold ends
//     at admission, when the room fails under --kv-load-failure fail, or with the room's
//     lease. D computes the chained keys of the prompt blocks it may resume from (its own
//     hit rule) — what a push must carry. POST /v1/kv_push?room=R takes the push's chunks in order
//     into the room's kv::PushAssembler, which checks every chunk, frame and object against them
//     and this replica's model fingerprint; after the last chunk the objects are installed, leased,
//     in the staging tier (a room whose push is partial holds the chunks' checked objects in memory
//     until the push completes, fails, or the room's lease ends). A request carrying the room
//     (header X-Fathom-KV-Room) then passes admit_room() and is submitted as any request: the
//     engine's admission reads the pushed blocks from the staging tier exactly as from the KV store
//     (each checked again, the token ids included) and prefills only the tail. A room whose push
//     failed or never came follows --kv-load-failure: recompute (the request prefills on D) or fail
//     (a 503 with code kv_transfer_failed, in the protocol's error shape).
//   - both: neither route; unchanged behaviour.
// Rooms live at most `lease_s`; at most kMaxRooms are open.
//
// One PdRoutes per server, built before it listens and destroyed after it stops (the
// destructor waits for prefill jobs). Thread-safe: the routes run on the transport's workers
// and on a thread per prefill job; admit_room() on the server's workers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/block_format.h"
#include "kv/memory_store.h"
#include "kv/pd_wire.h"
#include "kv/retention.h"
#include "serve/http_server.h"

namespace fathom::engine {
class Generator;
class KvReserver;
}  // namespace fathom::engine

namespace fathom::serve {

enum class PdRole { kBoth, kPrefill, kDecode };
// "both", "prefill", "decode"; kInvalidArgument for anything else.
Result<PdRole> parse_pd_role(std::string_view name);
const char* pd_role_name(PdRole r);

struct PdOptions {
  PdRole role = PdRole::kBoth;
  kv::Fingerprint model;  // the engine's (the runner's fingerprint)
  int64_t block_tokens = 128;
  // prefill: the tier the engine writes into (leases); decode: where pushed objects go.
  // Not owned; REQUIRES (prefill, decode): non-null.
  kv::MemoryStore* stage = nullptr;
  // prefill: the engine's store (the stage, or tiers over it), read for the push. Not owned.
  kv::Store* store = nullptr;
  // decode: the engine's KV holds (a reservation holds pages when non-null). Not owned.
  engine::KvReserver* reserver = nullptr;
  kv::RetentionPolicy retention;
  bool recompute_on_failure = true;  // decode: --kv-load-failure recompute (else fail)
  // prefill: the push stream's bytes per chunk (one HTTP body each, plus a 40-byte header);
  // keep it well under D's body limit (32 MiB).
  size_t push_chunk_bytes = kv::kDefaultChunkBytes;
  double lease_s = 30;  // leases on P's pushed blocks; a room's life on D
  int push_timeout_ms = 30000;
  std::string push_auth_header;  // sent with pushes ("Authorization: Bearer K\r\n" or empty)
  // Testing aids (prefill): alter a byte inside the first pushed block object before framing
  // (D must reject it), wait this long after the prefill before pushing, and this long
  // between chunks.
  bool test_corrupt_push = false;
  int test_push_delay_ms = 0;
  int test_chunk_delay_ms = 0;
};

class PdRoutes {
 public:
  static constexpr size_t kMaxRooms = 4096;

  // `engine` must outlive this object.
  PdRoutes(engine::Generator& engine, PdOptions options);
  ~PdRoutes();
  PdRoutes(const PdRoutes&) = delete;
  PdRoutes& operator=(const PdRoutes&) = delete;

  PdRole role() const { return opt_.role; }
  // Registers the role's routes; `unauthorized` answers a request without a valid key.
  // REQUIRES: before the server listens.
  void add_to(http::HttpServer& server,
              std::function<std::optional<http::Reply>(const http::Request&)> unauthorized);
  // Decode: the gate of a request carrying `room`. Waits (bounded) while its push is being
  // received; then OK to submit it (the pushed blocks are in the stage, or the failure is to be
  // recomputed), or kResourceExhausted naming the failure under --kv-load-failure fail.
  Status admit_room(std::string_view room);
  // The role and the hand-off's counters, Prometheus text.
  std::string metrics_text() const;

 private:
  // kReserved: no chunk yet; kPartial: some chunks in, more expected; kReceiving: a chunk is
  // being checked (its handler holds the assembler); then kComplete or kFailed.
  enum class RoomState { kReserved, kPartial, kReceiving, kComplete, kFailed };
  struct Room {
    std::vector<uint64_t> chain;  // the prompt blocks D may resume from
    RoomState state = RoomState::kReserved;
    std::string why;  // kFailed
    std::chrono::steady_clock::time_point deadline;
    std::unique_ptr<kv::PushAssembler> push;  // from the first chunk until complete or failed
    int64_t chunk_bytes = 0;                  // the bodies of the chunks accepted so far
    uint64_t hold = 0;                        // the engine's KV hold for the request (0: none)
    int64_t buffered = 0;  // of chunk_bytes, what counts in buffered_ (a push not yet done)
  };

  http::Response reserve(const http::Request& req);
  http::Response receive(const http::Request& req);
  // The prefill job (on a thread of its own); `cancelled` is set when the client left.
  http::Response prefill(const std::string& body, const std::atomic<bool>& cancelled);
  void expire_rooms_locked(std::chrono::steady_clock::time_point now);
  // The room's push no longer buffers anything (done, failed, or the room goes).
  void unbuffer_locked(Room& room);

  engine::Generator& engine_;
  const PdOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Room, std::less<>> rooms_;  // guarded by mu_
  int64_t jobs_ = 0;                                // guarded by mu_: prefill jobs running
  // Chunk bytes of pushes not yet complete, over all rooms (guarded by mu_): at most the
  // staging tier's budget, so partial pushes cannot hold more memory than it.
  int64_t buffered_ = 0;
  // Counters (guarded by mu_).
  struct Counters {
    int64_t prefills = 0, prefill_failures = 0, pushes = 0, push_failures = 0;
    int64_t pushed_blocks = 0, pushed_bytes = 0, pushed_chunks = 0;
    double push_seconds = 0;
    int64_t rooms = 0, received_pushes = 0, rejected_pushes = 0, received_blocks = 0,
            received_windows = 0, received_bytes = 0, transfer_failures = 0, recomputed = 0;
    int64_t received_chunks = 0, rejected_chunks = 0, refused_reservations = 0;
  } n_;

  friend class PdJob;
};

}  // namespace fathom::serve
