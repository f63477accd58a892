// The KV store's object format: one 128-token prefix block of one sequence (every KV source's
// entries for those tokens, with the block's token ids) or, as a separate object keyed by the
// same boundary, the window side object (the sliding-window state a hit needs to resume
// exactly). Both are an envelope — a fixed 72-byte header and a list of tagged sections — whose
// section contents only the model knows (model/v41.h documents its tags). Everything is
// little-endian:
//
//   offset  size  field
//        0     8  magic "FATHOMKV"
//        8     2  format version (kBlockFormatVersion)
//       10     1  kind (1 = block, 2 = window side object)
//       11     1  reserved, 0
//       12     4  block_tokens (tokens per block, 128)
//       16    16  model fingerprint (XXH3-128 of config + weights identity: low, high)
//       32     8  key: the prefix cache's chained hash of the block
//       40     8  parent: the previous block's key (0 for block 1)
//       48     4  index: the block's 1-based position in its chain
//       52     4  sections
//       56     8  payload bytes (everything after the header)
//       64     8  checksum: XXH3-64 of the payload, seeded with XXH3-64 of bytes [0, 64)
//       72        payload: per section u32 tag, u32 rows, u64 bytes, then the bytes
//
// decode_object() checks every field against what the reader expects (a block of another
// model, another key or another position is as wrong as a flipped bit) and returns a kCorrupt
// Status with a BlockFault naming the check that failed; nothing read from a store is used
// before it has passed. Free functions and plain values: safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom::kv {

inline constexpr std::string_view kBlockMagic = "FATHOMKV";
inline constexpr uint16_t kBlockFormatVersion = 1;
inline constexpr size_t kObjectHeaderBytes = 72;
inline constexpr size_t kSectionHeaderBytes = 16;  // u32 tag, u32 rows, u64 bytes

// What a block was computed by: config and weights identity (and the numerics that shape KV).
struct Fingerprint {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Fingerprint&) const = default;
  std::string hex() const;  // 32 hex digits, high first
};

// Builds a Fingerprint from any number of byte strings (XXH3-128 over their concatenation,
// each preceded by its length, so ("ab","c") and ("a","bc") differ). One thread at a time.
class FingerprintBuilder {
 public:
  FingerprintBuilder();
  ~FingerprintBuilder();
  FingerprintBuilder(const FingerprintBuilder&) = delete;
  FingerprintBuilder& operator=(const FingerprintBuilder&) = delete;
  void add(std::string_view bytes);
  void add_u64(uint64_t v);
  Fingerprint finish() const;

 private:
  void* state_;  // XXH3_state_t
};

enum class ObjectKind : uint8_t { kBlock = 1, kWindow = 2 };

struct ObjectHeader {
  ObjectKind kind = ObjectKind::kBlock;
  uint32_t block_tokens = 0;
  Fingerprint model;
  uint64_t key = 0, parent = 0;
  uint32_t index = 0;  // 1-based
};

// Where an object failed its checks.
enum class BlockFault {
  kNone,
  kTruncated,     // shorter than its header or than the payload it declares
  kBadMagic,      // not a Fathom KV object
  kBadVersion,    // another format version
  kWrongKind,     // a block where a window object was expected, or the reverse
  kForeignModel,  // another model's fingerprint
  kWrongKey,      // another block's key, parent, index or block size
  kBadLength,     // longer than its header says
  kChecksum,      // the bytes were altered
  kBadSection,    // a section table that overruns the payload, or contents the model rejects
  kWrongTokens,   // the block's token ids are not the request's (a hash collision)
};
const char* block_fault_name(BlockFault f);

// One tagged section: `rows` is a count the model checks (entries, tokens); `bytes` views the
// buffer the object was decoded from.
struct Section {
  uint32_t tag = 0, rows = 0;
  std::string_view bytes;
};

struct DecodedObject {
  ObjectHeader header;
  std::vector<Section> sections;
  // The section with `tag`, or null.
  const Section* find(uint32_t tag) const;
};

// Collects sections, then encodes the object. Not thread-safe.
class ObjectWriter {
 public:
  void add(uint32_t tag, uint32_t rows, const void* data, size_t bytes);
  // The encoded object (header + sections), little-endian, with its checksum.
  std::string finish(const ObjectHeader& header) const;

 private:
  std::string payload_;
  uint32_t sections_ = 0;
};

// The length of the object ObjectWriter::finish() encodes from sections of these byte sizes
// (for sizing a store without encoding one).
int64_t encoded_object_bytes(std::span<const int64_t> section_bytes);

// Validates `bytes` as the object `expect` describes (kind, block_tokens, model, key, parent,
// index must all match) and returns its sections, which view `bytes` (it must outlive them).
// On failure: kCorrupt, and *fault (when non-null) says which check failed.
Result<DecodedObject> decode_object(std::string_view bytes, const ObjectHeader& expect,
                                    BlockFault* fault = nullptr);

// The checks of decode_object() that need no expectation (length, magic, version, the
// declared payload length, the checksum): what a store tier can check of bytes it read,
// knowing nothing of the model. kCorrupt with the fault, as decode_object() gives it.
Status check_envelope(std::string_view bytes);

// A kCorrupt Status for a model-level check of a decoded object, tagged with its fault.
Status block_fault(BlockFault f, const std::string& detail);
// The fault a Status from decode_object() or block_fault() carries (kNone for any other).
BlockFault fault_of(const Status& s);

}  // namespace fathom::kv
