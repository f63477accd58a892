// The two ends of one push, as the P/D hand-off runs it (serve/pd_routes.cc): P sends the
// push's chunks (kv::encode_chunks output) over a Link; D takes each with a kv::PushAssembler
// (every chunk's checksum, every frame's, every object's) and answers. Two protocols:
//   kAck        D answers every chunk and P waits for the answer before the next chunk — what
//               one POST per chunk does today;
//   kPipelined  P sends every chunk without waiting; D answers once, after the last.
// An answer is 8 bytes: u32 the kv::PushFault (0: accepted), u32 the chunk index.
// Free functions: the caller's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "link.h"
#include "seeded_push.h"

namespace fathom::bench {

enum class PushMode { kAck, kPipelined };
const char* push_mode_name(PushMode m);

struct SendOutcome {
  double seconds = 0;      // first byte sent to D's last answer
  double cpu_seconds = 0;  // this process's CPU time over the same span
  uint32_t fault = 0;      // D's answer when it refused a chunk (a kv::PushFault), else 0
  uint32_t fault_chunk = 0;
};
// Sends `chunks` and waits for D's answer(s). An error only when the link failed.
Result<SendOutcome> send_push(Link& link, const std::vector<std::string>& chunks, PushMode mode);

struct ReceiveOutcome {
  double cpu_seconds = 0;  // from the first chunk's wait to the last answer sent
  Status verdict;          // OK: every chunk passed and the objects equal the ones sent
  uint32_t fault = 0;      // the kv::PushFault D answered, when a chunk failed
};
// Takes `chunk_count` chunks (fewer in kAck mode when one fails: P stops at D's refusal) and
// checks them; then compares the verified push with `want`. An error only when the link failed.
Result<ReceiveOutcome> receive_push(Link& link, const SeededPush& want, uint32_t chunk_count,
                                    PushMode mode);

}  // namespace fathom::bench
