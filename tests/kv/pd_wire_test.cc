// The P/D hand-off's push format (kv/pd_wire.h) and the staging tier (kv/memory_store.h): a
// push round-trips; every cut, flipped byte, foreign model, wrong key, reordering and count
// is rejected with the PushFault (and BlockFault) that names it; a push cut into chunks of any
// size assembles to the same objects, and every cut, flipped byte, missing, repeated or
// reordered chunk, changed count or offset is its own typed fault; leased objects outlive the
// byte budget until their lease ends.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "kv/block_format.h"
#include "kv/memory_store.h"
#include "kv/pd_wire.h"

namespace fathom::kv {
namespace {

Fingerprint model(const char* name) {
  FingerprintBuilder fb;
  fb.add(name);
  return fb.finish();
}

std::vector<uint64_t> chain(int n) {
  std::vector<uint64_t> c;
  for (int i = 0; i < n; ++i) c.push_back(0x1000 + uint64_t(i) * 0x9e3779b97f4a7c15ull);
  return c;
}

std::string object(const Fingerprint& m, const std::vector<uint64_t>& c, uint32_t index,
                   ObjectKind kind) {
  ObjectHeader h;
  h.kind = kind;
  h.block_tokens = 128;
  h.model = m;
  h.key = c[index - 1];
  h.parent = index > 1 ? c[index - 2] : 0;
  h.index = index;
  ObjectWriter w;
  std::vector<int32_t> ids(128, int32_t(index));
  w.add(1, 128, ids.data(), ids.size() * 4);
  return w.finish(h);
}

std::string push(const std::vector<std::string>& blocks, std::string_view window) {
  return encode_push(blocks, window);
}

struct Fixture {
  Fingerprint m = model("demo");
  std::vector<uint64_t> keys = chain(4);
  std::vector<std::string> blocks;
  std::string window;
  PushExpectation expect;
  Fixture() {
    for (uint32_t b = 1; b <= 3; ++b) blocks.push_back(object(m, keys, b, ObjectKind::kBlock));
    window = object(m, keys, 3, ObjectKind::kWindow);
    expect.model = m;
    expect.chain = keys;
  }
};

PushFailure failure(std::string_view body, const PushExpectation& e) {
  PushFailure why;
  auto r = verify_push(body, e, &why);
  EXPECT_FALSE(r.is_ok());
  if (!r.is_ok()) {
    const PushFailure again = push_failure_of(r.status());
    EXPECT_EQ(again.fault, why.fault) << r.status().message();
    EXPECT_EQ(again.block, why.block) << r.status().message();
  }
  return why;
}

TEST(PdWire, RoundTrip) {
  Fixture f;
  const std::string body = encode_push(f.blocks, f.window);
  auto v = verify_push(body, f.expect);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  ASSERT_EQ(v->blocks.size(), 3u);
  EXPECT_EQ(v->blocks[2], f.blocks[2]);
  EXPECT_EQ(v->window, f.window);
  EXPECT_EQ(v->window_block, 3u);
  EXPECT_EQ(v->object_bytes, int64_t(f.blocks[0].size() * 3 + f.window.size()));
  // No objects at all is a valid (empty) push; a window may sit below the last block.
  EXPECT_TRUE(verify_push(push({}, ""), f.expect).is_ok());
  auto lower =
      verify_push(encode_push(f.blocks, object(f.m, f.keys, 2, ObjectKind::kWindow)), f.expect);
  ASSERT_TRUE(lower.is_ok()) << lower.status().message();
  EXPECT_EQ(lower->window_block, 2u);
}

TEST(PdWire, EveryTruncationIsTyped) {
  Fixture f;
  const std::string body = encode_push(f.blocks, f.window);
  for (size_t n = 0; n < body.size(); n += 97) {
    const PushFailure why = failure(body.substr(0, n), f.expect);
    EXPECT_EQ(why.fault, PushFault::kTruncated) << "cut at " << n;
  }
  EXPECT_EQ(failure(body.substr(0, body.size() - 1), f.expect).fault, PushFault::kTruncated);
}

TEST(PdWire, EveryFlippedByteIsRejected) {
  Fixture f;
  const std::string body = push({f.blocks[0]}, "");
  for (size_t i = 0; i < body.size(); ++i) {
    std::string bad = body;
    bad[i] = char(bad[i] ^ 0x5a);
    PushFailure why;
    EXPECT_FALSE(verify_push(bad, f.expect, &why).is_ok()) << "byte " << i;
    EXPECT_NE(why.fault, PushFault::kNone) << "byte " << i;
  }
  // A byte flipped inside an object's payload: the frame's checksum catches it in transit.
  std::string bad = body;
  bad[kFrameHeaderBytes + kObjectHeaderBytes + 20] ^= 1;
  EXPECT_EQ(failure(bad, f.expect).fault, PushFault::kFrameChecksum);
}

TEST(PdWire, AnObjectAlteredBeforeFramingFailsItsOwnChecksum) {
  Fixture f;
  std::string damaged = f.blocks[0];
  damaged[kObjectHeaderBytes + 20] ^= 1;  // framed afterwards: the frame checksum passes
  const PushFailure why = failure(push({damaged}, ""), f.expect);
  EXPECT_EQ(why.fault, PushFault::kObject);
  EXPECT_EQ(why.block, BlockFault::kChecksum);
}

TEST(PdWire, WrongModelAndWrongKeyAreTyped) {
  Fixture f;
  const std::string foreign = object(model("other"), f.keys, 1, ObjectKind::kBlock);
  PushFailure why = failure(push({foreign}, ""), f.expect);
  EXPECT_EQ(why.fault, PushFault::kObject);
  EXPECT_EQ(why.block, BlockFault::kForeignModel);
  // Another prompt's block 1 (the chain the receiver computed differs).
  std::vector<uint64_t> other = f.keys;
  other[0] ^= 1;
  why = failure(push({object(f.m, other, 1, ObjectKind::kBlock)}, ""), f.expect);
  EXPECT_EQ(why.block, BlockFault::kWrongKey);
  // A block where a window object was sent (the kind byte is part of the header).
  std::string as_window = f.blocks[0];
  as_window[10] = char(ObjectKind::kWindow);
  why = failure(push({f.blocks[0], f.blocks[1]}, as_window), f.expect);
  EXPECT_EQ(why.fault, PushFault::kObject);
}

TEST(PdWire, OrderCountsAndExtrasAreChecked) {
  Fixture f;
  // Out of order, twice, past the expected chain, a window above the blocks sent.
  EXPECT_EQ(failure(push({f.blocks[1]}, ""), f.expect).fault, PushFault::kUnexpected);
  EXPECT_EQ(failure(push({f.blocks[0], f.blocks[0]}, ""), f.expect).fault, PushFault::kUnexpected);
  PushExpectation shorter = f.expect;
  shorter.chain.resize(2);
  EXPECT_EQ(failure(encode_push(f.blocks, ""), shorter).fault, PushFault::kUnexpected);
  EXPECT_EQ(failure(push({f.blocks[0]}, f.window), f.expect).fault, PushFault::kUnexpected);
  // An end frame that miscounts, bytes after it, a frame of an unknown type.
  std::string body;
  append_frame(&body, FrameType::kObject, f.blocks[0]);
  std::string end(16, '\0');
  end[0] = 2;
  append_frame(&body, FrameType::kEnd, end);
  EXPECT_EQ(failure(body, f.expect).fault, PushFault::kCountMismatch);
  EXPECT_EQ(failure(push({f.blocks[0]}, "") + "x", f.expect).fault, PushFault::kUnexpected);
  std::string odd;
  append_frame(&odd, FrameType(7), "abc");
  EXPECT_EQ(failure(odd, f.expect).fault, PushFault::kBadFrame);
  EXPECT_EQ(failure(std::string(40, 'x'), f.expect).fault, PushFault::kBadFrame);
}

// Feeds `chunks` to a fresh assembler; the failure of the first chunk that fails (kNone when
// none does), after checking that the Status names the same failure.
PushFailure chunk_failure(const std::vector<std::string>& chunks, const PushExpectation& e,
                          size_t* failed_at = nullptr) {
  PushAssembler a(e);
  for (size_t i = 0; i < chunks.size(); ++i) {
    PushFailure why;
    auto r = a.add_chunk(chunks[i], &why);
    if (r.is_ok()) continue;
    const PushFailure again = push_failure_of(r.status());
    EXPECT_EQ(again.fault, why.fault) << r.status().message();
    EXPECT_EQ(again.block, why.block) << r.status().message();
    if (failed_at) *failed_at = i;
    return why;
  }
  return {};
}

// A push of 4 blocks and a window, to be cut into chunks.
struct ChunkFixture : Fixture {
  std::string stream;
  ChunkFixture() {
    keys = chain(5);
    expect.chain = keys;
    blocks.clear();
    for (uint32_t b = 1; b <= 4; ++b) blocks.push_back(object(m, keys, b, ObjectKind::kBlock));
    window = object(m, keys, 4, ObjectKind::kWindow);
    stream = encode_push(blocks, window);
  }
};

TEST(PdWire, ChunkedPushRoundTripsWhateverTheChunkSize) {
  ChunkFixture f;
  auto whole = verify_push(f.stream, f.expect);
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  // Larger than the push, cut inside headers and objects, smaller than any object (an object
  // spans many chunks), one byte a chunk.
  for (size_t bytes :
       {size_t(1) << 20, f.stream.size(), size_t(1000), size_t(97), size_t(13), size_t(1)}) {
    const std::vector<std::string> chunks = encode_chunks(f.stream, bytes);
    ASSERT_EQ(chunks.size(), (f.stream.size() + bytes - 1) / bytes);
    PushAssembler a(f.expect);
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_LE(chunks[i].size(), bytes + kChunkHeaderBytes);
      auto r = a.add_chunk(chunks[i]);
      ASSERT_TRUE(r.is_ok()) << "chunk " << i << " of " << bytes << ": " << r.status().message();
      EXPECT_EQ(*r, i + 1 == chunks.size());
    }
    ASSERT_TRUE(a.complete());
    EXPECT_EQ(a.chunks_received(), chunks.size());
    EXPECT_EQ(a.stream_bytes(), f.stream.size());
    const VerifiedPush v = a.take();
    EXPECT_EQ(v.blocks, whole->blocks);
    EXPECT_EQ(v.window, f.window);
    EXPECT_EQ(v.window_block, 4u);
    EXPECT_EQ(v.object_bytes, whole->object_bytes);
  }
}

TEST(PdWire, EveryChunkTruncationAndFlippedByteIsTyped) {
  ChunkFixture f;
  const std::vector<std::string> chunks = encode_chunks(f.stream, 1500);
  ASSERT_GE(chunks.size(), 3u);
  const std::string& c = chunks[1];
  for (size_t n = 0; n < c.size(); n += 7) {
    EXPECT_EQ(chunk_failure({chunks[0], c.substr(0, n)}, f.expect).fault,
              PushFault::kChunkTruncated)
        << "cut at " << n;
  }
  for (size_t i = 0; i < c.size(); ++i) {
    std::string bad = c;
    bad[i] = char(bad[i] ^ 0x5a);
    const PushFault got = chunk_failure({chunks[0], bad}, f.expect).fault;
    // The magic and reserved bytes: not a chunk; the length: the body no longer matches it;
    // anything else, the header's fields included: the checksum.
    if (i < 8)
      EXPECT_EQ(got, PushFault::kChunkBadHeader) << "byte " << i;
    else if (i >= 24 && i < 32)
      EXPECT_TRUE(got == PushFault::kChunkTruncated || got == PushFault::kChunkBadHeader)
          << "byte " << i << ": " << push_fault_name(got);
    else
      EXPECT_EQ(got, PushFault::kChunkChecksum) << "byte " << i;
  }
  EXPECT_EQ(chunk_failure({c + "x"}, f.expect).fault, PushFault::kChunkBadHeader);
}

TEST(PdWire, ChunkOrderDuplicatesCountsAndOffsetsAreTyped) {
  ChunkFixture f;
  const std::vector<std::string> c = encode_chunks(f.stream, 700);
  const uint32_t n = uint32_t(c.size());
  ASSERT_GE(n, 4u);
  size_t at = 99;
  // A chunk missing: the next one arrives out of order.
  EXPECT_EQ(chunk_failure({c[0], c[2]}, f.expect, &at).fault, PushFault::kChunkOutOfOrder);
  EXPECT_EQ(at, 1u);
  EXPECT_EQ(chunk_failure({c[1]}, f.expect).fault, PushFault::kChunkOutOfOrder);
  // The same chunk twice.
  EXPECT_EQ(chunk_failure({c[0], c[1], c[1]}, f.expect, &at).fault, PushFault::kChunkDuplicate);
  EXPECT_EQ(at, 2u);
  // Index past the count, a count of 0, a count that changes between chunks.
  const std::string_view p1 = std::string_view(c[1]).substr(kChunkHeaderBytes);
  const uint64_t off1 = std::string_view(c[0]).size() - kChunkHeaderBytes;
  EXPECT_EQ(chunk_failure({encode_chunk(n, n, 0, "")}, f.expect).fault, PushFault::kChunkBadHeader);
  EXPECT_EQ(chunk_failure({encode_chunk(0, 0, 0, "")}, f.expect).fault, PushFault::kChunkBadHeader);
  EXPECT_EQ(chunk_failure({c[0], encode_chunk(1, n + 1, off1, p1)}, f.expect).fault,
            PushFault::kChunkCountMismatch);
  // A stream offset that skips or repeats bytes.
  EXPECT_EQ(chunk_failure({c[0], encode_chunk(1, n, off1 + 1, p1)}, f.expect).fault,
            PushFault::kChunkOffset);
  EXPECT_EQ(chunk_failure({c[0], encode_chunk(1, n, 0, p1)}, f.expect).fault,
            PushFault::kChunkOffset);
  // The stream ends before the last chunk (a count too high) ...
  {
    std::vector<std::string> more = encode_chunks(f.stream, 700);
    for (uint32_t i = 0; i < n; ++i)
      more[i] = encode_chunk(i, n + 1, uint64_t(i) * 700,
                             std::string_view(c[i]).substr(kChunkHeaderBytes));
    EXPECT_EQ(chunk_failure(more, f.expect, &at).fault, PushFault::kChunkCountMismatch);
    EXPECT_EQ(at, size_t(n - 1));
  }
  // ... or the last chunk comes before the stream ends (a count too low): truncated.
  {
    std::vector<std::string> fewer;
    for (uint32_t i = 0; i + 1 < n; ++i)
      fewer.push_back(encode_chunk(i, n - 1, uint64_t(i) * 700,
                                   std::string_view(c[i]).substr(kChunkHeaderBytes)));
    EXPECT_EQ(chunk_failure(fewer, f.expect).fault, PushFault::kTruncated);
  }
  // Bytes after the end frame in the last chunk.
  EXPECT_EQ(chunk_failure(encode_chunks(f.stream + "x", 700), f.expect).fault,
            PushFault::kUnexpected);
  // After the push completed, or failed, every chunk is refused.
  PushAssembler a(f.expect);
  for (const std::string& x : c) ASSERT_TRUE(a.add_chunk(x).is_ok());
  PushFailure why;
  EXPECT_FALSE(a.add_chunk(c.back(), &why).is_ok());
  EXPECT_EQ(why.fault, PushFault::kChunkAfterEnd);
  PushAssembler b(f.expect);
  EXPECT_FALSE(b.add_chunk(c[1]).is_ok());
  EXPECT_FALSE(b.add_chunk(c[0], &why).is_ok());
  EXPECT_EQ(why.fault, PushFault::kChunkAfterEnd);
}

TEST(PdWire, ChunksCarryTheStreamsOwnChecks) {
  ChunkFixture f;
  // An object altered before framing fails its own checksum, though it spans chunks.
  std::vector<std::string> damaged = f.blocks;
  damaged[1][kObjectHeaderBytes + 20] ^= 1;
  PushFailure why = chunk_failure(encode_chunks(encode_push(damaged, f.window), 700), f.expect);
  EXPECT_EQ(why.fault, PushFault::kObject);
  EXPECT_EQ(why.block, BlockFault::kChecksum);
  // Blocks out of order; a frame flipped inside one chunk (re-chunked, so the chunk checks pass).
  EXPECT_EQ(chunk_failure(encode_chunks(push({f.blocks[1]}, ""), 700), f.expect).fault,
            PushFault::kUnexpected);
  std::string flipped = f.stream;
  flipped[kFrameHeaderBytes + kObjectHeaderBytes + 20] ^= 1;
  EXPECT_EQ(chunk_failure(encode_chunks(flipped, 700), f.expect).fault, PushFault::kFrameChecksum);
  // A frame that claims more than the receiver takes is refused before it is buffered.
  PushExpectation bounded = f.expect;
  bounded.max_stream_bytes = f.stream.size() - 1;
  size_t at = 0;
  EXPECT_EQ(chunk_failure(encode_chunks(f.stream, 700), bounded, &at).fault, PushFault::kBadFrame);
  EXPECT_EQ(verify_push(f.stream, bounded).status().code(), StatusCode::kCorrupt);
  bounded.max_stream_bytes = f.stream.size();
  EXPECT_EQ(chunk_failure(encode_chunks(f.stream, 700), bounded).fault, PushFault::kNone);
}

StoreKey key(uint64_t i) { return StoreKey{i, i * 3}; }

TEST(MemoryStore, LeastRecentOutFirstButLeasedObjectsStay) {
  MemoryStore s({.budget_bytes = 300, .accept_puts = true});
  const auto later = std::chrono::steady_clock::now() + std::chrono::hours(1);
  const StoreKey leased[] = {key(1)};
  s.lease(leased, later);  // before the object exists
  EXPECT_TRUE(s.put(key(1), std::string(100, 'a'), kDefaultRetention));
  EXPECT_TRUE(s.put(key(2), std::string(100, 'b'), kDefaultRetention));
  EXPECT_TRUE(s.put(key(3), std::string(100, 'c'), kDefaultRetention));
  EXPECT_TRUE(s.put(key(4), std::string(100, 'd'), kDefaultRetention));  // evicts 2, not 1
  EXPECT_TRUE(s.contains(key(1)));
  EXPECT_FALSE(s.contains(key(2)));
  EXPECT_EQ(s.leased(), 1);
  s.release(leased);
  EXPECT_EQ(s.leased(), 0);
  EXPECT_TRUE(s.put(key(5), std::string(100, 'e'), kDefaultRetention));  // now 1 may go
  EXPECT_FALSE(s.contains(key(1)));
  auto got = s.get(key(5), kDefaultRetention);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(*got, std::string(100, 'e'));
  EXPECT_EQ(s.get(key(9), kDefaultRetention).status().code(), StatusCode::kNotFound);
}

TEST(MemoryStore, ReceiveOnlyTierRefusesPutsAndKeepsInstalledObjectsLeased) {
  MemoryStore s({.budget_bytes = 250, .accept_puts = false});
  EXPECT_FALSE(s.put(key(1), "x", kDefaultRetention));
  const auto later = std::chrono::steady_clock::now() + std::chrono::hours(1);
  EXPECT_TRUE(s.install(key(2), std::string(100, 'a'), later));
  EXPECT_TRUE(s.install(key(3), std::string(100, 'b'), later));
  // Both leased: a third does not fit and is refused rather than evicting them.
  EXPECT_FALSE(s.install(key(4), std::string(100, 'c'), later));
  EXPECT_TRUE(s.contains(key(2)) && s.contains(key(3)));
  // Past its deadline a lease no longer holds the object.
  const auto past = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  MemoryStore t({.budget_bytes = 150, .accept_puts = false});
  EXPECT_TRUE(t.install(key(2), std::string(100, 'a'), past));
  EXPECT_TRUE(t.install(key(3), std::string(100, 'b'), later));
  EXPECT_FALSE(t.contains(key(2)));
  EXPECT_EQ(t.stats().evictions, 1);
}

}  // namespace
}  // namespace fathom::kv
