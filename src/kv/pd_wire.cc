#include "kv/pd_wire.h"

#include <xxhash.h>

#include <cstring>

namespace fathom::kv {
namespace {

void put_u64(std::string& o, uint64_t v) {
  for (int i = 0; i < 8; ++i) o.push_back(char((v >> (8 * i)) & 0xff));
}
uint64_t get_le(std::string_view b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(b[at + size_t(i)])) << (8 * i);
  return v;
}

constexpr PushFault kPushFaults[] = {PushFault::kNone,          PushFault::kTruncated,
                                     PushFault::kBadFrame,      PushFault::kFrameChecksum,
                                     PushFault::kCountMismatch, PushFault::kUnexpected,
                                     PushFault::kObject};

Result<VerifiedPush> fail(PushFailure f, PushFailure* out, const std::string& detail) {
  if (out) *out = f;
  std::string m = std::string("KV push ") + push_fault_name(f.fault) + ": " + detail;
  return corrupt(std::move(m));
}
Result<VerifiedPush> fail(PushFault f, PushFailure* out, const std::string& detail) {
  return fail(PushFailure{f, BlockFault::kNone}, out, detail);
}

}  // namespace

const char* push_fault_name(PushFault f) {
  switch (f) {
    case PushFault::kNone:
      return "none";
    case PushFault::kTruncated:
      return "truncated";
    case PushFault::kBadFrame:
      return "bad_frame";
    case PushFault::kFrameChecksum:
      return "frame_checksum";
    case PushFault::kCountMismatch:
      return "count_mismatch";
    case PushFault::kUnexpected:
      return "unexpected_object";
    case PushFault::kObject:
      return "object";
  }
  return "unknown";
}

PushFailure push_failure_of(const Status& s) {
  PushFailure f;
  if (s.code() != StatusCode::kCorrupt) return f;
  for (PushFault p : kPushFaults) {
    const std::string prefix = std::string("KV push ") + push_fault_name(p) + ":";
    if (s.message().rfind(prefix, 0) != 0) continue;
    f.fault = p;
    if (p == PushFault::kObject) f.block = fault_of(corrupt(s.message().substr(prefix.size() + 1)));
    return f;
  }
  return f;
}

void append_frame(std::string* out, FrameType type, std::string_view payload) {
  out->append(kFrameMagic);
  out->push_back(char(type));
  out->append(3, '\0');
  put_u64(*out, payload.size());
  put_u64(*out, XXH3_64bits(payload.data(), payload.size()));
  out->append(payload);
}

std::string encode_push(std::span<const std::string> blocks, std::string_view window) {
  size_t total = kFrameHeaderBytes + 16 + window.size() + kFrameHeaderBytes;
  for (const std::string& b : blocks) total += kFrameHeaderBytes + b.size();
  std::string out;
  out.reserve(total);
  uint64_t objects = 0, bytes = 0;
  for (const std::string& b : blocks) {
    append_frame(&out, FrameType::kObject, b);
    ++objects;
    bytes += b.size();
  }
  if (!window.empty()) {
    append_frame(&out, FrameType::kObject, window);
    ++objects;
    bytes += window.size();
  }
  std::string end;
  put_u64(end, objects);
  put_u64(end, bytes);
  append_frame(&out, FrameType::kEnd, end);
  return out;
}

Result<VerifiedPush> verify_push(std::string_view body, const PushExpectation& expect,
                                 PushFailure* why) {
  VerifiedPush out;
  uint64_t objects = 0;
  size_t at = 0;
  for (;;) {
    if (at == body.size()) return fail(PushFault::kTruncated, why, "no end frame");
    if (body.size() - at < kFrameHeaderBytes)
      return fail(PushFault::kTruncated, why, "the body ends inside a frame header");
    const std::string_view head = body.substr(at, kFrameHeaderBytes);
    if (head.substr(0, 4) != kFrameMagic || head[5] != 0 || head[6] != 0 || head[7] != 0)
      return fail(PushFault::kBadFrame, why, "not a frame at byte " + std::to_string(at));
    const uint8_t type = uint8_t(head[4]);
    const uint64_t len = get_le(head, 8, 8), sum = get_le(head, 16, 8);
    if (type != uint8_t(FrameType::kObject) && type != uint8_t(FrameType::kEnd))
      return fail(PushFault::kBadFrame, why, "frame type " + std::to_string(type));
    if (len > kMaxFramePayload)
      return fail(PushFault::kBadFrame, why, "a frame of " + std::to_string(len) + " bytes");
    at += kFrameHeaderBytes;
    if (body.size() - at < len)
      return fail(PushFault::kTruncated, why, "the body ends inside a frame's payload");
    const std::string_view payload = body.substr(at, size_t(len));
    at += size_t(len);
    if (XXH3_64bits(payload.data(), payload.size()) != sum)
      return fail(PushFault::kFrameChecksum, why, "frame " + std::to_string(objects + 1));
    if (type == uint8_t(FrameType::kEnd)) {
      if (len != 16 || get_le(payload, 0, 8) != objects ||
          get_le(payload, 8, 8) != uint64_t(out.object_bytes))
        return fail(
            PushFault::kCountMismatch, why,
            "the end frame does not count the " + std::to_string(objects) + " objects sent");
      if (at != body.size()) return fail(PushFault::kUnexpected, why, "bytes after the end frame");
      return out;
    }
    // An object: its kind and position say what the receiver must expect of it; then every
    // field and the checksum are checked against that (decode_object).
    if (payload.size() < kObjectHeaderBytes)
      return fail({PushFault::kObject, BlockFault::kTruncated}, why,
                  "KV object truncated: " + std::to_string(payload.size()) + " bytes");
    const uint8_t kind = uint8_t(payload[10]);
    const uint64_t index = get_le(payload, 48, 4);
    const bool is_window = kind == uint8_t(ObjectKind::kWindow);
    const uint64_t have = out.blocks.size();
    if (!out.window.empty())
      return fail(PushFault::kUnexpected, why, "an object after the window side object");
    if (index < 1 || index > expect.chain.size() || (is_window ? index > have : index != have + 1))
      return fail(PushFault::kUnexpected, why,
                  std::string(is_window ? "a window side object" : "a block") + " at block " +
                      std::to_string(index) + " (expected " +
                      (is_window ? "one of blocks 1.." + std::to_string(have)
                                 : "block " + std::to_string(have + 1)) +
                      " of " + std::to_string(expect.chain.size()) + ")");
    ObjectHeader h;
    h.kind = is_window ? ObjectKind::kWindow : ObjectKind::kBlock;
    h.block_tokens = expect.block_tokens;
    h.model = expect.model;
    h.key = expect.chain[size_t(index - 1)];
    h.parent = index > 1 ? expect.chain[size_t(index - 2)] : 0;
    h.index = uint32_t(index);
    BlockFault bf = BlockFault::kNone;
    auto d = decode_object(payload, h, &bf);
    if (!d.is_ok()) return fail({PushFault::kObject, bf}, why, d.status().message());
    ++objects;
    out.object_bytes += int64_t(payload.size());
    if (is_window) {
      out.window = std::string(payload);
      out.window_block = uint32_t(index);
    } else {
      out.blocks.emplace_back(payload);
    }
  }
}

}  // namespace fathom::kv
