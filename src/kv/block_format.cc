#include "kv/block_format.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

namespace fathom::kv {
namespace {

void put_u16(std::string& o, uint16_t v) {
  for (int i = 0; i < 2; ++i) o.push_back(char((v >> (8 * i)) & 0xff));
}
void put_u32(std::string& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o.push_back(char((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& o, uint64_t v) {
  for (int i = 0; i < 8; ++i) o.push_back(char((v >> (8 * i)) & 0xff));
}
uint64_t get_le(std::string_view b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(b[at + size_t(i)])) << (8 * i);
  return v;
}

uint64_t checksum(std::string_view header64, std::string_view payload) {
  return XXH3_64bits_withSeed(payload.data(), payload.size(),
                              XXH3_64bits(header64.data(), header64.size()));
}

constexpr BlockFault kFaults[] = {
    BlockFault::kNone,       BlockFault::kTruncated,  BlockFault::kBadMagic,
    BlockFault::kBadVersion, BlockFault::kWrongKind,  BlockFault::kForeignModel,
    BlockFault::kWrongKey,   BlockFault::kBadLength,  BlockFault::kChecksum,
    BlockFault::kBadSection, BlockFault::kWrongTokens};

Result<DecodedObject> fail(BlockFault f, BlockFault* out, const std::string& detail) {
  if (out) *out = f;
  return block_fault(f, detail);
}

}  // namespace

std::string Fingerprint::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
  return buf;
}

FingerprintBuilder::FingerprintBuilder() : state_(XXH3_createState()) {
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
FingerprintBuilder::~FingerprintBuilder() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void FingerprintBuilder::add(std::string_view bytes) {
  add_u64(bytes.size());
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}

void FingerprintBuilder::add_u64(uint64_t v) {
  std::string le;
  put_u64(le, v);
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), le.data(), le.size());
}

Fingerprint FingerprintBuilder::finish() const {
  const XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return Fingerprint{h.low64, h.high64};
}

const char* block_fault_name(BlockFault f) {
  switch (f) {
    case BlockFault::kNone:
      return "none";
    case BlockFault::kTruncated:
      return "truncated";
    case BlockFault::kBadMagic:
      return "bad_magic";
    case BlockFault::kBadVersion:
      return "bad_version";
    case BlockFault::kWrongKind:
      return "wrong_kind";
    case BlockFault::kForeignModel:
      return "foreign_model";
    case BlockFault::kWrongKey:
      return "wrong_key";
    case BlockFault::kBadLength:
      return "bad_length";
    case BlockFault::kChecksum:
      return "checksum";
    case BlockFault::kBadSection:
      return "bad_section";
    case BlockFault::kWrongTokens:
      return "wrong_tokens";
  }
  return "unknown";
}

Status block_fault(BlockFault f, const std::string& detail) {
  return corrupt(std::string("KV object ") + block_fault_name(f) + ": " + detail);
}

BlockFault fault_of(const Status& s) {
  if (s.code() != StatusCode::kCorrupt) return BlockFault::kNone;
  for (BlockFault f : kFaults) {
    const std::string prefix = std::string("KV object ") + block_fault_name(f) + ":";
    if (s.message().rfind(prefix, 0) == 0) return f;
  }
  return BlockFault::kNone;
}

const Section* DecodedObject::find(uint32_t tag) const {
  for (const Section& s : sections)
    if (s.tag == tag) return &s;
  return nullptr;
}

void ObjectWriter::add(uint32_t tag, uint32_t rows, const void* data, size_t bytes) {
  put_u32(payload_, tag);
  put_u32(payload_, rows);
  put_u64(payload_, bytes);
  payload_.append(static_cast<const char*>(data), bytes);
  ++sections_;
}

int64_t encoded_object_bytes(std::span<const int64_t> section_bytes) {
  int64_t n = int64_t(kObjectHeaderBytes);
  for (int64_t b : section_bytes) n += int64_t(kSectionHeaderBytes) + b;
  return n;
}

std::string ObjectWriter::finish(const ObjectHeader& h) const {
  std::string o;
  o.reserve(kObjectHeaderBytes + payload_.size());
  o.append(kBlockMagic);
  put_u16(o, kBlockFormatVersion);
  o.push_back(char(h.kind));
  o.push_back(0);
  put_u32(o, h.block_tokens);
  put_u64(o, h.model.lo);
  put_u64(o, h.model.hi);
  put_u64(o, h.key);
  put_u64(o, h.parent);
  put_u32(o, h.index);
  put_u32(o, sections_);
  put_u64(o, payload_.size());
  put_u64(o, checksum(o, payload_));
  o += payload_;
  return o;
}

namespace {

// decode_object()'s checks of the header alone, before it is read: long enough, the magic,
// the version. Ok, or the fault.
Status check_head(std::string_view b) {
  if (b.size() < kObjectHeaderBytes)
    return block_fault(BlockFault::kTruncated,
                       std::to_string(b.size()) + " bytes, shorter than the header");
  if (b.substr(0, kBlockMagic.size()) != kBlockMagic)
    return block_fault(BlockFault::kBadMagic, "no FATHOMKV magic");
  if (get_le(b, 8, 2) != kBlockFormatVersion)
    return block_fault(BlockFault::kBadVersion,
                       "format version " + std::to_string(get_le(b, 8, 2)));
  return Status::ok();
}

// Its checks of the payload: the length the header declares, then the checksum.
// REQUIRES: check_head(b) passed.
Status check_payload(std::string_view b) {
  const uint64_t payload = get_le(b, 56, 8);
  if (payload != b.size() - kObjectHeaderBytes)
    return block_fault(
        payload > b.size() - kObjectHeaderBytes ? BlockFault::kTruncated : BlockFault::kBadLength,
        std::to_string(b.size()) + " bytes, the header declares " +
            std::to_string(payload + kObjectHeaderBytes));
  if (checksum(b.substr(0, 64), b.substr(kObjectHeaderBytes)) != get_le(b, 64, 8))
    return block_fault(BlockFault::kChecksum, "checksum mismatch");
  return Status::ok();
}

// `st` failed: its fault into *fault, when asked.
Status failed(Status st, BlockFault* fault) {
  if (fault) *fault = fault_of(st);
  return st;
}

}  // namespace

Status check_envelope(std::string_view b) {
  FATHOM_RETURN_IF_ERROR(check_head(b));
  return check_payload(b);
}

Result<DecodedObject> decode_object(std::string_view b, const ObjectHeader& expect,
                                    BlockFault* fault) {
  if (fault) *fault = BlockFault::kNone;
  if (Status st = check_head(b); !st.is_ok()) return failed(std::move(st), fault);
  DecodedObject out;
  ObjectHeader& h = out.header;
  h.kind = ObjectKind(uint8_t(b[10]));
  h.block_tokens = uint32_t(get_le(b, 12, 4));
  h.model = Fingerprint{get_le(b, 16, 8), get_le(b, 24, 8)};
  h.key = get_le(b, 32, 8);
  h.parent = get_le(b, 40, 8);
  h.index = uint32_t(get_le(b, 48, 4));
  const uint64_t sections = get_le(b, 52, 4);
  if (h.kind != expect.kind || b[11] != 0)
    return fail(BlockFault::kWrongKind, fault, "kind " + std::to_string(int(uint8_t(b[10]))));
  if (!(h.model == expect.model))
    return fail(BlockFault::kForeignModel, fault,
                "fingerprint " + h.model.hex() + ", this model is " + expect.model.hex());
  if (h.key != expect.key || h.parent != expect.parent || h.index != expect.index ||
      h.block_tokens != expect.block_tokens)
    return fail(BlockFault::kWrongKey, fault,
                "block " + std::to_string(h.index) + " of another chain or block size");
  if (Status st = check_payload(b); !st.is_ok()) return failed(std::move(st), fault);
  const std::string_view body = b.substr(kObjectHeaderBytes);
  size_t at = 0;
  for (uint64_t i = 0; i < sections; ++i) {
    if (body.size() - at < 16)
      return fail(BlockFault::kBadSection, fault, "section table overruns the payload");
    Section s;
    s.tag = uint32_t(get_le(body, at, 4));
    s.rows = uint32_t(get_le(body, at + 4, 4));
    const uint64_t n = get_le(body, at + 8, 8);
    at += 16;
    if (n > body.size() - at)
      return fail(BlockFault::kBadSection, fault, "section overruns the payload");
    s.bytes = body.substr(at, size_t(n));
    at += size_t(n);
    out.sections.push_back(s);
  }
  if (at != body.size())
    return fail(BlockFault::kBadSection, fault, "bytes after the last section");
  return out;
}

}  // namespace fathom::kv
