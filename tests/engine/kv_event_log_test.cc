// The prefix cache's event feed (kv/kv_event_log.h, kv/kv_event_wire.h): a PrefixCache's
// observer feeds a KvEventLog, and the events replayed from id 0 — and the snapshot — equal an
// independent model (a std::map kept by the test from the cache's own contents); a reader's
// resync when its events left the ring, when it names another instance or an id from the
// future; the ring's bound; the wire format round trip and its reader against garbage.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kv/kv_event_log.h"
#include "kv/kv_event_wire.h"
#include "kv/prefix_cache.h"

namespace fathom::kv {
namespace {

struct FakeBlock final : CachedBlock {
  int64_t bytes() const override { return 100; }
  bool has_side_object() const override { return true; }
  void drop_side_object() override {}
  bool frees_pages() const override { return true; }
};

KvBlockChange stored(uint64_t h, uint64_t parent) { return {h, parent, KvEventKind::kStored}; }
KvBlockChange removed(uint64_t h) { return {h, 0, KvEventKind::kRemoved}; }

TEST(KvEventLog, ChangesBecomeEventsWithConsecutiveIds) {
  KvEventLog log(64);
  // A chain segment 1 -> 2 -> 3, a new chain 7, then two removals: three... four events.
  const std::vector<KvBlockChange> step1 = {stored(1, 0), stored(2, 1), stored(3, 2), stored(7, 0)};
  log.publish(step1);
  const std::vector<KvBlockChange> step2 = {removed(3), removed(7)};
  ASSERT_TRUE(log.try_publish(step2));
  const KvEventRead r = log.read(0, log.instance(), 100);
  ASSERT_FALSE(r.resync);
  EXPECT_EQ(r.last_id, 3u);
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[0].id, 1u);
  EXPECT_EQ(r.events[0].kind, KvEventKind::kStored);
  EXPECT_EQ(r.events[0].parent, 0u);
  EXPECT_EQ(r.events[0].hashes, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(r.events[1].hashes, (std::vector<uint64_t>{7}));
  EXPECT_EQ(r.events[2].kind, KvEventKind::kRemoved);
  EXPECT_EQ(r.events[2].hashes, (std::vector<uint64_t>{3, 7}));
  // From the middle, and a page at a time.
  const KvEventRead mid = log.read(1, 0, 1);
  ASSERT_EQ(mid.events.size(), 1u);
  EXPECT_EQ(mid.events[0].id, 2u);
  EXPECT_TRUE(log.read(3, 0, 10).events.empty());
  const KvSnapshot s = log.snapshot();
  EXPECT_EQ(s.last_id, 3u);
  std::map<uint64_t, uint64_t> got(s.blocks.begin(), s.blocks.end());
  EXPECT_EQ(got, (std::map<uint64_t, uint64_t>{{1, 0}, {2, 1}}));
}

TEST(KvEventLog, ReadersResyncWhenTheyCannotContinue) {
  KvEventLog log(8);  // eight block changes
  for (uint64_t i = 1; i <= 20; ++i) {
    const std::vector<KvBlockChange> c = {stored(100 + i, 0)};
    log.publish(c);
  }
  EXPECT_EQ(log.last_id(), 20u);
  EXPECT_TRUE(log.read(0, 0, 100).resync);   // events 1..12 left the ring
  EXPECT_TRUE(log.read(11, 0, 100).resync);  // event 12 did
  const KvEventRead r = log.read(12, 0, 100);
  ASSERT_FALSE(r.resync);
  ASSERT_EQ(r.events.size(), 8u);  // the ring's bound
  EXPECT_EQ(r.events.front().id, 13u);
  EXPECT_EQ(r.events.back().id, 20u);
  EXPECT_TRUE(log.read(21, 0, 100).resync);                   // from the future
  EXPECT_TRUE(log.read(20, log.instance() ^ 1, 100).resync);  // another instance (a restart)
  EXPECT_FALSE(log.read(20, log.instance(), 100).resync);
  EXPECT_EQ(log.stats().ring_dropped_through, 12u);
  // An event whose first records were overwritten is not given half.
  KvEventLog small(4);
  const std::vector<KvBlockChange> chain = {stored(1, 0), stored(2, 1), stored(3, 2)};
  small.publish(chain);  // event 1: three records
  const std::vector<KvBlockChange> two = {removed(9), removed(8)};
  small.publish(two);  // event 2: overwrites event 1's first record
  EXPECT_TRUE(small.read(0, 0, 10).resync);
  EXPECT_EQ(small.read(1, 0, 10).events.size(), 1u);
}

// Random inserts and evictions on a real PrefixCache, its observer batching the changes per
// "step" as the engine does: replaying every event from id 0 into a std::map, and the log's
// snapshot, both equal the cache's own contents (asked block by block).
TEST(KvEventLog, ReplayAndSnapshotEqualThePrefixCache) {
  PrefixCache cache;
  KvEventLog log(1 << 16);
  std::vector<KvBlockChange> pending;
  cache.set_observer([&](uint64_t h, uint64_t parent, bool cached) {
    pending.push_back({h, parent, cached ? KvEventKind::kStored : KvEventKind::kRemoved});
  });
  std::mt19937_64 rng(7);
  std::map<uint64_t, uint64_t> parent_at_insert;
  for (int step = 0; step < 400; ++step) {
    // A prompt of 1..6 blocks over a small alphabet (shared prefixes), cached block by block.
    std::vector<int32_t> tokens(size_t(4 * (1 + rng() % 6)));
    for (auto& t : tokens) t = int32_t(rng() % 3);
    const std::vector<uint64_t> h = prefix_block_hashes(tokens, 4, rng() % 2);
    for (size_t b = 0; b < h.size(); ++b) {
      if (cache.contains(h[b])) continue;
      if (b > 0 && !cache.contains(h[b - 1])) break;
      cache.insert(h[b], b > 0 ? h[b - 1] : 0, int64_t(b + 1), std::make_unique<FakeBlock>());
      parent_at_insert[h[b]] = b > 0 ? h[b - 1] : 0;
    }
    while (cache.blocks() > 40) cache.evict_one(false);
    if (step % 3 == 0 && !log.try_publish(pending)) FAIL() << "no reader holds the lock";
    if (step % 3 == 0) pending.clear();
  }
  log.publish(pending);
  std::map<uint64_t, uint64_t> model;
  uint64_t next = 1;
  for (uint64_t since = 0;;) {
    const KvEventRead r = log.read(since, log.instance(), 50);
    ASSERT_FALSE(r.resync);
    if (r.events.empty()) break;
    for (const KvEvent& e : r.events) {
      ASSERT_EQ(e.id, next++);
      uint64_t parent = e.parent;
      for (uint64_t x : e.hashes) {
        if (e.kind == KvEventKind::kStored) {
          ASSERT_EQ(model.count(x), 0u);
          model[x] = parent;
          parent = x;
        } else {
          ASSERT_EQ(model.erase(x), 1u);
        }
      }
      since = e.id;
    }
  }
  std::map<uint64_t, uint64_t> truth;
  for (const auto& [x, parent] : parent_at_insert)
    if (cache.contains(x)) truth[x] = parent;
  EXPECT_EQ(model, truth);
  const KvSnapshot s = log.snapshot();
  const std::map<uint64_t, uint64_t> snap(s.blocks.begin(), s.blocks.end());
  EXPECT_EQ(snap, truth);
  EXPECT_EQ(s.last_id, next - 1);
  EXPECT_GT(log.stats().removed_blocks, 0u);
}

TEST(KvEventWire, RoundTrips) {
  KvEvent e;
  e.id = 42;
  e.kind = KvEventKind::kStored;
  e.parent = 0xfedcba9876543210ull;
  e.hashes = {1, 0xffffffffffffffffull};
  std::string line;
  append_kv_event_line(line, e);
  EXPECT_EQ(
      line,
      R"({"event_id":42,"type":"stored","parent_block_hash":"fedcba9876543210","block_hashes":["0000000000000001","ffffffffffffffff"]})"
      "\n");
  line.pop_back();
  auto back = parse_kv_feed_line(line);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->kind, KvFeedLine::Kind::kEvent);
  EXPECT_EQ(back->event.id, 42u);
  EXPECT_EQ(back->event.parent, e.parent);
  EXPECT_EQ(back->event.hashes, e.hashes);
  std::string rs;
  append_kv_resync_line(rs, 0xabc, 9);
  rs.pop_back();
  auto r = parse_kv_feed_line(rs);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->kind, KvFeedLine::Kind::kResync);
  EXPECT_EQ(r->instance, 0xabcu);
  EXPECT_EQ(r->last_id, 9u);
  EXPECT_EQ(parse_kv_feed_line("")->kind, KvFeedLine::Kind::kHeartbeat);
  KvSnapshot s;
  s.instance = 5;
  s.last_id = 7;
  s.blocks = {{10, 0}, {11, 10}};
  auto sb = parse_kv_snapshot(kv_snapshot_json(s));
  ASSERT_TRUE(sb.is_ok()) << sb.status().message();
  EXPECT_EQ(sb->instance, 5u);
  EXPECT_EQ(sb->last_id, 7u);
  EXPECT_EQ(sb->blocks, s.blocks);
}

TEST(KvEventWire, GarbageIsAnError) {
  for (const char* bad : {
           "{",
           "[]",
           R"({"event_id":1})",
           R"({"event_id":1,"type":"moved","block_hashes":["0000000000000001"]})",
           R"({"event_id":0,"type":"removed","block_hashes":["0000000000000001"]})",
           R"({"event_id":-1,"type":"removed","block_hashes":["0000000000000001"]})",
           R"({"event_id":1,"type":"removed","block_hashes":[]})",
           R"({"event_id":1,"type":"removed","block_hashes":["01"]})",
           R"({"event_id":1,"type":"removed","block_hashes":["000000000000000g"]})",
           R"({"event_id":1,"type":"removed","block_hashes":[1]})",
           R"({"event_id":1,"type":"stored","block_hashes":["0000000000000001"]})",
           R"({"event_id":"1","type":"removed","block_hashes":["0000000000000001"]})",
           R"({"type":"resync","last_event_id":1})",
       })
    EXPECT_FALSE(parse_kv_feed_line(bad).is_ok()) << bad;
  for (const char* bad : {
           "",
           "{}",
           R"({"instance":"0000000000000001","last_event_id":1})",
           R"({"instance":"0000000000000001","last_event_id":1,"blocks":[["0000000000000001"]]})",
           R"({"instance":"0000000000000001","last_event_id":1,"blocks":[[null,null]]})",
           R"({"instance":1,"last_event_id":1,"blocks":[]})",
       })
    EXPECT_FALSE(parse_kv_snapshot(bad).is_ok()) << bad;
}

}  // namespace
}  // namespace fathom::kv
