// A push stream of an exact size built of real KV-store objects (kv/block_format.h) with
// seeded pseudo-random contents, and what a decode replica expects of it: the payload the
// transport bench moves. The stream is n block objects of about `block_bytes` each and one
// window side object at block n taking the rest, framed by kv::encode_push() exactly as a
// prefill replica frames its push; the receiver checks it with kv::PushAssembler exactly as a
// decode replica does. Both processes of the bench build it from the same arguments, so the
// receiver compares what arrived with its own copy. Plain values: any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/pd_wire.h"

namespace fathom::bench {

struct SeededPush {
  kv::PushExpectation expect;
  std::vector<std::string> blocks;  // blocks[i]: block i + 1
  std::string window;               // at block blocks.size()
  std::string stream;               // kv::encode_push(blocks, window): stream_bytes bytes
};

// The smallest object the bench builds: a header and one section header.
inline constexpr uint64_t kMinObjectBytes = kv::kObjectHeaderBytes + kv::kSectionHeaderBytes;

// Builds a push of exactly `stream_bytes` bytes: as many blocks of `block_bytes` (object bytes,
// header included) as fit beside a window of at least `window_bytes`, at least one; the window
// takes what is left. kInvalidArgument when the sizes cannot make such a push.
Result<SeededPush> make_seeded_push(uint64_t stream_bytes, uint64_t block_bytes,
                                    uint64_t window_bytes, uint64_t seed);

// OK when `got` holds exactly the objects of `want`; kCorrupt naming the first difference.
Status compare_push(const kv::VerifiedPush& got, const SeededPush& want);

}  // namespace fathom::bench
