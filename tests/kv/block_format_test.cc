// The KV store's object format: a round trip, then every way a stored object can be wrong —
// each flipped byte, each truncation, a longer file, another model, another block — must be
// rejected with the fault that names it.
#include "kv/block_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace fathom::kv {
namespace {

ObjectHeader header() {
  ObjectHeader h;
  h.kind = ObjectKind::kBlock;
  h.block_tokens = 128;
  FingerprintBuilder fb;
  fb.add("config");
  fb.add("weights");
  h.model = fb.finish();
  h.key = 0x1234567890abcdefull;
  h.parent = 0x0fedcba987654321ull;
  h.index = 3;
  return h;
}

std::string encoded(const ObjectHeader& h) {
  ObjectWriter w;
  std::vector<int32_t> ids(128);
  for (int i = 0; i < 128; ++i) ids[size_t(i)] = i * 7;
  std::vector<float> rows(64 * 3);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i) * 0.5f;
  w.add(1, 128, ids.data(), ids.size() * 4);
  w.add(0x102, 64, rows.data(), rows.size() * 4);
  w.add(7, 0, nullptr, 0);
  return w.finish(h);
}

TEST(BlockFormat, RoundTrip) {
  const ObjectHeader h = header();
  const std::string b = encoded(h);
  BlockFault f = BlockFault::kChecksum;
  auto d = decode_object(b, h, &f);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(f, BlockFault::kNone);
  ASSERT_EQ(d->sections.size(), 3u);
  const Section* ids = d->find(1);
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->rows, 128u);
  ASSERT_EQ(ids->bytes.size(), 512u);
  int32_t third;
  std::memcpy(&third, ids->bytes.data() + 8, 4);
  EXPECT_EQ(third, 14);
  EXPECT_EQ(d->find(0x102)->rows, 64u);
  EXPECT_EQ(d->find(7)->bytes.size(), 0u);
  EXPECT_EQ(d->find(99), nullptr);
  EXPECT_EQ(d->header.key, h.key);
}

TEST(BlockFormat, HeaderIsLittleEndianAtDocumentedOffsets) {
  const ObjectHeader h = header();
  const std::string b = encoded(h);
  EXPECT_EQ(b.substr(0, 8), "FATHOMKV");
  EXPECT_EQ(uint8_t(b[8]), 1);  // version
  EXPECT_EQ(uint8_t(b[9]), 0);
  EXPECT_EQ(uint8_t(b[10]), 1);  // kind
  EXPECT_EQ(uint8_t(b[12]), 128);
  EXPECT_EQ(uint8_t(b[32]), 0xef);  // key, low byte first
  EXPECT_EQ(uint8_t(b[39]), 0x12);
  EXPECT_EQ(uint8_t(b[48]), 3);  // index
  EXPECT_EQ(uint8_t(b[52]), 3);  // sections
  EXPECT_EQ(b.size(), kObjectHeaderBytes + (16 + 512) + (16 + 768) + 16);
}

TEST(BlockFormat, EveryFlippedByteIsDetected) {
  const ObjectHeader h = header();
  const std::string good = encoded(h);
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t bit : {uint8_t(1), uint8_t(0x80)}) {
      std::string b = good;
      b[i] = char(uint8_t(b[i]) ^ bit);
      BlockFault f = BlockFault::kNone;
      auto d = decode_object(b, h, &f);
      ASSERT_FALSE(d.is_ok()) << "byte " << i;
      EXPECT_EQ(d.status().code(), StatusCode::kCorrupt);
      EXPECT_NE(f, BlockFault::kNone) << "byte " << i;
      EXPECT_EQ(fault_of(d.status()), f);
      if (i >= kObjectHeaderBytes) {
        EXPECT_EQ(f, BlockFault::kChecksum) << "byte " << i;
      }
    }
  }
}

TEST(BlockFormat, EveryTruncationIsDetected) {
  const ObjectHeader h = header();
  const std::string good = encoded(h);
  for (size_t n = 0; n < good.size(); ++n) {
    BlockFault f = BlockFault::kNone;
    auto d = decode_object(std::string_view(good).substr(0, n), h, &f);
    ASSERT_FALSE(d.is_ok()) << n;
    // A cut inside the magic reads as no magic at all.
    EXPECT_TRUE(f == BlockFault::kTruncated || (n < 8 && f == BlockFault::kBadMagic)) << n;
  }
  BlockFault f = BlockFault::kNone;
  EXPECT_FALSE(decode_object(good + "x", h, &f).is_ok());
  EXPECT_EQ(f, BlockFault::kBadLength);
}

TEST(BlockFormat, ForeignOrMisplacedObjectsAreRejected) {
  const ObjectHeader h = header();
  const std::string good = encoded(h);
  struct Case {
    ObjectHeader expect;
    BlockFault fault;
  };
  std::vector<Case> cases;
  ObjectHeader other_model = h;
  other_model.model.lo ^= 1;
  cases.push_back({other_model, BlockFault::kForeignModel});
  ObjectHeader other_key = h;
  other_key.key += 1;
  cases.push_back({other_key, BlockFault::kWrongKey});
  ObjectHeader other_parent = h;
  other_parent.parent += 1;
  cases.push_back({other_parent, BlockFault::kWrongKey});
  ObjectHeader other_index = h;
  other_index.index = 4;
  cases.push_back({other_index, BlockFault::kWrongKey});
  ObjectHeader other_size = h;
  other_size.block_tokens = 64;
  cases.push_back({other_size, BlockFault::kWrongKey});
  ObjectHeader window = h;
  window.kind = ObjectKind::kWindow;
  cases.push_back({window, BlockFault::kWrongKind});
  for (const Case& c : cases) {
    BlockFault f = BlockFault::kNone;
    EXPECT_FALSE(decode_object(good, c.expect, &f).is_ok());
    EXPECT_EQ(f, c.fault) << block_fault_name(c.fault);
  }
}

TEST(BlockFormat, GarbageIsRejected) {
  const ObjectHeader h = header();
  std::string b = encoded(h);
  // Random bytes after the magic.
  for (uint32_t seed = 1; seed < 200; ++seed) {
    std::string g = b;
    uint32_t x = seed;
    for (size_t i = 0; i < g.size(); ++i) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      if (i >= 8) g[i] = char(x);
    }
    EXPECT_FALSE(decode_object(g, h).is_ok());
  }
  EXPECT_FALSE(decode_object("", h).is_ok());
}

TEST(BlockFormat, FingerprintSeparatesItsParts) {
  FingerprintBuilder a, b;
  a.add("ab");
  a.add("c");
  b.add("a");
  b.add("bc");
  EXPECT_FALSE(a.finish() == b.finish());
  EXPECT_EQ(a.finish().hex().size(), 32u);
}

}  // namespace
}  // namespace fathom::kv
