// The P/D hand-off's wire format: what a prefill replica pushes to a decode replica (the push
// stream, carried by the chunks of POST /v1/kv_push, below). The payloads are the KV store's own
// objects (kv/block_format.h: a versioned, checksummed header naming the model, the block's chained
// key, its parent and its position) — the hand-off invents no other serialisation — each in a frame
// that carries its own length and checksum, so a cut or altered transfer is told apart from a
// damaged object:
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
//
// The push stream travels in chunks, each one HTTP body (POST /v1/kv_push?room=R), so that a
// hand-off of any size moves under the receiver's body limit (V4.1-Flash's window object alone
// is 18 MB). The stream is cut every chunk_bytes wherever that falls, inside an object or not:
// every chunk but the last carries exactly chunk_bytes of it, so a body never exceeds
// chunk_bytes + 40 whatever the objects' sizes, and the receiver holds at most one chunk plus
// one unfinished frame beyond the objects it has checked. Each chunk:
//
//   offset  size  field
//        0     4  magic "FKVC"
//        4     4  reserved, 0
//        8     4  chunk index (0-based)
//       12     4  chunk count (the push's chunks; the same in every chunk)
//       16     8  stream offset: the stream bytes carried by the chunks before this one
//       24     8  payload bytes
//       32     8  XXH3-64 of the payload, seeded with the XXH3-64 of bytes 0..31 (so a header
//                 altered in transit fails it too)
//       40        payload: the next bytes of the push stream
//
// PushAssembler takes a room's chunks in order and checks each (framing, checksum, index,
// count, offset) and, as frames complete, each frame and object exactly as verify_push does;
// the stream's end frame must end the last chunk.
// Free functions and plain values: safe from any thread. A PushAssembler belongs to one
// caller at a time.
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
inline constexpr std::string_view kChunkMagic = "FKVC";
inline constexpr size_t kChunkHeaderBytes = 40;
inline constexpr size_t kDefaultChunkBytes = size_t(8) << 20;

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
  // Chunks (PushAssembler):
  kChunkTruncated,      // a chunk's body ends inside its header or its payload
  kChunkBadHeader,      // not a chunk (magic, reserved bytes), an index past its count, a
                        // count of 0, or bytes after the payload
  kChunkChecksum,       // a chunk's header or payload was altered in transit
  kChunkDuplicate,      // a chunk already received (its index is below the next expected)
  kChunkOutOfOrder,     // a chunk ahead of its turn: the chunk(s) before it are missing
  kChunkCountMismatch,  // a count other than the earlier chunks', or the stream ended before
                        // (or did not end at) the last chunk
  kChunkOffset,         // a stream offset other than the bytes the earlier chunks carried
  kChunkAfterEnd,       // a chunk after the push was complete, or after it failed
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
  // The most stream bytes the receiver takes (0: no bound beyond kMaxFramePayload a frame): a
  // frame that would take the stream past it is kBadFrame, before its bytes are buffered.
  uint64_t max_stream_bytes = 0;
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
// The failure a Status from verify_push() or PushAssembler carries (kNone for any other).
PushFailure push_failure_of(const Status& s);

// The chunks of a push stream (encode_push()'s output): ceil(size / chunk_bytes) of them, at
// least one. REQUIRES: chunk_bytes > 0, fewer than 2^32 chunks.
std::vector<std::string> encode_chunks(std::string_view stream, size_t chunk_bytes);
// One chunk, as encode_chunks() makes them (tests build malformed sequences with it).
std::string encode_chunk(uint32_t index, uint32_t count, uint64_t offset, std::string_view payload);

// The receiving side of one chunked push: chunks go in, in order; objects are checked as their
// frames complete; after the last chunk the verified push comes out. Once a chunk fails, the
// assembler stays failed (every later chunk is kChunkAfterEnd).
class PushAssembler {
 public:
  explicit PushAssembler(PushExpectation expect);
  PushAssembler(const PushAssembler&) = delete;
  PushAssembler& operator=(const PushAssembler&) = delete;

  // Takes the next chunk: true when it was the last and the push is complete, false when more
  // are expected; kCorrupt (and *why) when the chunk or what it completes fails a check.
  Result<bool> add_chunk(std::string_view chunk, PushFailure* why = nullptr);
  // Chunks accepted so far, and the push's chunk count (0 before the first chunk).
  uint32_t chunks_received() const { return next_; }
  uint32_t chunk_count() const { return count_; }
  // The stream bytes accepted so far.
  uint64_t stream_bytes() const { return offset_; }
  bool complete() const { return complete_; }
  // The verified push. REQUIRES: complete(); once.
  VerifiedPush take() { return std::move(out_); }

 private:
  // Consumes the whole frames in pending_ (checking each), leaving an unfinished one.
  Status parse_frames(PushFailure* why);
  Result<bool> fail(PushFailure f, PushFailure* why, const std::string& detail);

  const PushExpectation expect_;
  uint32_t next_ = 0, count_ = 0;
  uint64_t offset_ = 0;
  std::string pending_;  // stream bytes of a frame not yet complete
  uint64_t objects_ = 0;
  bool ended_ = false;     // the end frame was read
  bool complete_ = false;  // the last chunk was taken and the stream ended with it
  bool failed_ = false;
  VerifiedPush out_;
};

}  // namespace fathom::kv
