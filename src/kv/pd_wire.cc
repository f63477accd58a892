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

constexpr PushFault kPushFaults[] = {PushFault::kNone,
                                     PushFault::kTruncated,
                                     PushFault::kBadFrame,
                                     PushFault::kFrameChecksum,
                                     PushFault::kCountMismatch,
                                     PushFault::kUnexpected,
                                     PushFault::kObject,
                                     PushFault::kChunkTruncated,
                                     PushFault::kChunkBadHeader,
                                     PushFault::kChunkChecksum,
                                     PushFault::kChunkDuplicate,
                                     PushFault::kChunkOutOfOrder,
                                     PushFault::kChunkCountMismatch,
                                     PushFault::kChunkOffset,
                                     PushFault::kChunkAfterEnd};

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
    case PushFault::kChunkTruncated:
      return "chunk_truncated";
    case PushFault::kChunkBadHeader:
      return "chunk_bad_header";
    case PushFault::kChunkChecksum:
      return "chunk_checksum";
    case PushFault::kChunkDuplicate:
      return "chunk_duplicate";
    case PushFault::kChunkOutOfOrder:
      return "chunk_out_of_order";
    case PushFault::kChunkCountMismatch:
      return "chunk_count_mismatch";
    case PushFault::kChunkOffset:
      return "chunk_offset";
    case PushFault::kChunkAfterEnd:
      return "chunk_after_end";
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

namespace {

Status fault_status(PushFailure f, PushFailure* out, const std::string& detail) {
  if (out) *out = f;
  return corrupt(std::string("KV push ") + push_fault_name(f.fault) + ": " + detail);
}
Status fault_status(PushFault f, PushFailure* out, const std::string& detail) {
  return fault_status(PushFailure{f, BlockFault::kNone}, out, detail);
}

// The parse state of one push stream: what verify_push() and PushAssembler share.
struct StreamState {
  VerifiedPush out;
  uint64_t objects = 0;
  bool ended = false;
};

// Consumes the whole frames of `buf` from *at (the stream byte `base` + *at), checking each
// frame and object; stops before a frame that is not complete yet. After the end frame any
// byte is an error.
Status consume_frames(std::string_view buf, size_t* at, uint64_t base,
                      const PushExpectation& expect, StreamState& st, PushFailure* why) {
  for (;;) {
    if (st.ended) {
      if (*at != buf.size())
        return fault_status(PushFault::kUnexpected, why, "bytes after the end frame");
      return Status::ok();
    }
    if (buf.size() - *at < kFrameHeaderBytes) return Status::ok();
    const std::string_view head = buf.substr(*at, kFrameHeaderBytes);
    if (head.substr(0, 4) != kFrameMagic || head[5] != 0 || head[6] != 0 || head[7] != 0)
      return fault_status(PushFault::kBadFrame, why,
                          "not a frame at byte " + std::to_string(base + *at));
    const uint8_t type = uint8_t(head[4]);
    const uint64_t len = get_le(head, 8, 8), sum = get_le(head, 16, 8);
    if (type != uint8_t(FrameType::kObject) && type != uint8_t(FrameType::kEnd))
      return fault_status(PushFault::kBadFrame, why, "frame type " + std::to_string(type));
    if (len > kMaxFramePayload)
      return fault_status(PushFault::kBadFrame, why,
                          "a frame of " + std::to_string(len) + " bytes");
    if (expect.max_stream_bytes > 0 &&
        base + *at + kFrameHeaderBytes + len > expect.max_stream_bytes)
      return fault_status(PushFault::kBadFrame, why,
                          "a frame of " + std::to_string(len) + " bytes takes the push past " +
                              std::to_string(expect.max_stream_bytes) + " bytes");
    if (buf.size() - *at - kFrameHeaderBytes < len) return Status::ok();
    const std::string_view payload = buf.substr(*at + kFrameHeaderBytes, size_t(len));
    *at += kFrameHeaderBytes + size_t(len);
    if (XXH3_64bits(payload.data(), payload.size()) != sum)
      return fault_status(PushFault::kFrameChecksum, why,
                          "frame " + std::to_string(st.objects + 1));
    VerifiedPush& out = st.out;
    if (type == uint8_t(FrameType::kEnd)) {
      if (len != 16 || get_le(payload, 0, 8) != st.objects ||
          get_le(payload, 8, 8) != uint64_t(out.object_bytes))
        return fault_status(
            PushFault::kCountMismatch, why,
            "the end frame does not count the " + std::to_string(st.objects) + " objects sent");
      st.ended = true;
      continue;
    }
    // An object: its kind and position say what the receiver must expect of it; then every
    // field and the checksum are checked against that (decode_object).
    if (payload.size() < kObjectHeaderBytes)
      return fault_status({PushFault::kObject, BlockFault::kTruncated}, why,
                          "KV object truncated: " + std::to_string(payload.size()) + " bytes");
    const uint8_t kind = uint8_t(payload[10]);
    const uint64_t index = get_le(payload, 48, 4);
    const bool is_window = kind == uint8_t(ObjectKind::kWindow);
    const uint64_t have = out.blocks.size();
    if (!out.window.empty())
      return fault_status(PushFault::kUnexpected, why, "an object after the window side object");
    if (index < 1 || index > expect.chain.size() || (is_window ? index > have : index != have + 1))
      return fault_status(PushFault::kUnexpected, why,
                          std::string(is_window ? "a window side object" : "a block") +
                              " at block " + std::to_string(index) + " (expected " +
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
    if (!d.is_ok()) return fault_status({PushFault::kObject, bf}, why, d.status().message());
    ++st.objects;
    out.object_bytes += int64_t(payload.size());
    if (is_window) {
      out.window = std::string(payload);
      out.window_block = uint32_t(index);
    } else {
      out.blocks.emplace_back(payload);
    }
  }
}

uint64_t chunk_checksum(std::string_view header32, std::string_view payload) {
  return XXH3_64bits_withSeed(payload.data(), payload.size(),
                              XXH3_64bits(header32.data(), header32.size()));
}

void put_u32(std::string& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o.push_back(char((v >> (8 * i)) & 0xff));
}

}  // namespace

Result<VerifiedPush> verify_push(std::string_view body, const PushExpectation& expect,
                                 PushFailure* why) {
  StreamState st;
  size_t at = 0;
  if (Status s = consume_frames(body, &at, 0, expect, st, why); !s.is_ok()) return s;
  if (!st.ended) {
    if (at == body.size()) return fail(PushFault::kTruncated, why, "no end frame");
    return fail(PushFault::kTruncated, why,
                body.size() - at < kFrameHeaderBytes ? "the body ends inside a frame header"
                                                     : "the body ends inside a frame's payload");
  }
  return std::move(st.out);
}

std::string encode_chunk(uint32_t index, uint32_t count, uint64_t offset,
                         std::string_view payload) {
  std::string out;
  out.reserve(kChunkHeaderBytes + payload.size());
  out.append(kChunkMagic);
  out.append(4, '\0');
  put_u32(out, index);
  put_u32(out, count);
  put_u64(out, offset);
  put_u64(out, payload.size());
  put_u64(out, chunk_checksum(out, payload));
  out.append(payload);
  return out;
}

std::vector<std::string> encode_chunks(std::string_view stream, size_t chunk_bytes) {
  const size_t n = stream.empty() ? 1 : (stream.size() + chunk_bytes - 1) / chunk_bytes;
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t at = i * chunk_bytes;
    out.push_back(encode_chunk(uint32_t(i), uint32_t(n), at, stream.substr(at, chunk_bytes)));
  }
  return out;
}

PushAssembler::PushAssembler(PushExpectation expect) : expect_(std::move(expect)) {}

Result<bool> PushAssembler::fail(PushFailure f, PushFailure* why, const std::string& detail) {
  failed_ = true;
  return fault_status(f, why, detail);
}

Result<bool> PushAssembler::add_chunk(std::string_view chunk, PushFailure* why) {
  const auto bad = [&](PushFault f, const std::string& detail) {
    return fail(PushFailure{f, BlockFault::kNone}, why, detail);
  };
  if (failed_ || complete_)
    return fault_status(
        PushFault::kChunkAfterEnd, why,
        std::string("a chunk after the push ") + (failed_ ? "failed" : "was complete"));
  if (chunk.size() < kChunkHeaderBytes)
    return bad(PushFault::kChunkTruncated, "the chunk ends inside its header");
  const std::string_view head = chunk.substr(0, kChunkHeaderBytes);
  if (head.substr(0, 4) != kChunkMagic || get_le(head, 4, 4) != 0)
    return bad(PushFault::kChunkBadHeader, "not a chunk");
  const uint32_t index = uint32_t(get_le(head, 8, 4)), count = uint32_t(get_le(head, 12, 4));
  const uint64_t offset = get_le(head, 16, 8), len = get_le(head, 24, 8);
  const uint64_t sum = get_le(head, 32, 8);
  if (chunk.size() - kChunkHeaderBytes < len)
    return bad(PushFault::kChunkTruncated, "the chunk ends inside its payload");
  if (chunk.size() - kChunkHeaderBytes > len)
    return bad(PushFault::kChunkBadHeader, std::to_string(chunk.size() - kChunkHeaderBytes - len) +
                                               " bytes after the chunk's payload");
  const std::string_view payload = chunk.substr(kChunkHeaderBytes);
  if (chunk_checksum(head.substr(0, 32), payload) != sum)
    return bad(PushFault::kChunkChecksum, "chunk " + std::to_string(index));
  if (count == 0 || index >= count)
    return bad(PushFault::kChunkBadHeader,
               "chunk " + std::to_string(index) + " of " + std::to_string(count));
  if (count_ != 0 && count != count_)
    return bad(PushFault::kChunkCountMismatch, "chunk " + std::to_string(index) + " counts " +
                                                   std::to_string(count) + " chunks, not " +
                                                   std::to_string(count_));
  if (index < next_)
    return bad(PushFault::kChunkDuplicate, "chunk " + std::to_string(index) + " again");
  if (index > next_)
    return bad(PushFault::kChunkOutOfOrder,
               "chunk " + std::to_string(index) + " before chunk " + std::to_string(next_));
  if (offset != offset_)
    return bad(PushFault::kChunkOffset, "chunk " + std::to_string(index) + " at stream byte " +
                                            std::to_string(offset) + ", not " +
                                            std::to_string(offset_));
  // The frames: parsed from the chunk itself when nothing is pending (no copy), else from the
  // pending bytes with the chunk appended.
  StreamState st{std::move(out_), objects_, ended_};
  Status s = Status::ok();
  const uint64_t base = offset_ - pending_.size();
  if (pending_.empty()) {
    size_t at = 0;
    s = consume_frames(payload, &at, base, expect_, st, why);
    if (s.is_ok()) pending_.assign(payload.substr(at));
  } else {
    pending_.append(payload);
    size_t at = 0;
    s = consume_frames(pending_, &at, base, expect_, st, why);
    if (s.is_ok()) pending_.erase(0, at);
  }
  out_ = std::move(st.out);
  objects_ = st.objects;
  ended_ = st.ended;
  if (!s.is_ok()) {
    failed_ = true;
    return s;
  }
  next_ = index + 1;
  count_ = count;
  offset_ += len;
  const bool last = next_ == count_;
  if (ended_ && !last)
    return bad(PushFault::kChunkCountMismatch,
               "the push ended in chunk " + std::to_string(index) + " of " + std::to_string(count));
  if (!last) return false;
  if (!ended_)
    return bad(PushFault::kTruncated,
               pending_.empty() ? "no end frame" : "the last chunk ends inside a frame");
  complete_ = true;
  return true;
}

}  // namespace fathom::kv
