// The P/D hand-off's wire format: what a prefill replica pushes to a decode replica (the body
// of POST /v1/kv_push). The payloads are the KV store's own objects (kv/block_format.h: a
// versioned, checksummed header naming the model, the block's chained key, its parent and its
// position) — the hand-off invents no other serialisation — each in a frame that carries its
// own length and checksum, so a cut or altered transfer is told apart from a damaged object:
//
//   offset  size  field
//        0     4  magic "FKVF"
//        4     1  type: 1 = object, 2 = end
//        5     3  reserved, 0
//        8     8  payload bytes
//       16     8  XXH3-64 of the payload
//       24        payload: an encoded object, or for the end frame u64 objects, u64 their bytes
//
// A push is the block objects of blocks 1..n in order, then at most one window side object at
// a block <= n (where the decode replica resumes), then the end frame. verify_push() checks
// every frame and every object against what the decode replica expects — its own model
// fingerprint, and the chained keys it computed itself from the prompt the router gave it —
// and fails with a PushFault (and, for an object, the BlockFault) naming the check.
// Free functions and plain values: safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/block_format.h"

namespace fathom::kv {

inline constexpr std::string_view kFrameMagic = "FKVF";
inline constexpr size_t kFrameHeaderBytes = 24;
inline constexpr uint64_t kMaxFramePayload = uint64_t(1) << 31;

enum class FrameType : uint8_t { kObject = 1, kEnd = 2 };

// Where a push failed its checks.
enum class PushFault {
  kNone,
  kTruncated,      // the body ends inside a frame, or without its end frame
  kBadFrame,       // not a frame (magic, type, reserved bytes), or a frame too large
  kFrameChecksum,  // a frame's payload was altered in transit
  kCountMismatch,  // the end frame's counts are not those of the frames before it
  kUnexpected,     // an object the receiver did not ask for: out of order, twice, past the
                   // blocks it expects, a window before its block, bytes after the end frame
  kObject,         // an object failed its own checks (PushFailure::block says which)
};
const char* push_fault_name(PushFault f);

struct PushFailure {
  PushFault fault = PushFault::kNone;
  BlockFault block = BlockFault::kNone;  // with kObject
};

// What the decode replica expects: its model, the block size, and the chained keys of the
// prompt blocks it may resume from (blocks 1..chain.size()).
struct PushExpectation {
  Fingerprint model;
  uint32_t block_tokens = 128;
  std::vector<uint64_t> chain;
};

// A push that passed every check: the objects' bytes, as sent.
struct VerifiedPush {
  std::vector<std::string> blocks;  // blocks[i]: block i + 1
  std::string window;               // the window side object, or empty
  uint32_t window_block = 0;        // its block (1-based); 0 without one
  int64_t object_bytes = 0;         // the objects' bytes, frames not counted
};

// Appends one frame.
void append_frame(std::string* out, FrameType type, std::string_view payload);
// A whole push body: `blocks` (blocks 1..n, in order), then `window` unless empty, then the
// end frame.
std::string encode_push(std::span<const std::string> blocks, std::string_view window);
// Checks `body` against `expect`. On failure kCorrupt, and *why (when non-null) says where.
Result<VerifiedPush> verify_push(std::string_view body, const PushExpectation& expect,
                                 PushFailure* why = nullptr);
// The failure a Status from verify_push() carries (kNone for any other).
PushFailure push_failure_of(const Status& s);

}  // namespace fathom::kv
