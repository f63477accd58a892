// kv::PrefixCache with stand-in blocks: chained, salted hashes; the longest matching chain
// (cut back to a side object when asked); only leaves are evicted, least recently used first.
#include "kv/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

namespace fathom::kv {
namespace {

struct FakeBlock final : CachedBlock {
  FakeBlock(int64_t b, bool side, bool frees) : b_(b), side_(side), frees_(frees) {}
  int64_t bytes() const override { return b_; }
  bool has_side_object() const override { return side_; }
  void drop_side_object() override { side_ = false; }
  bool frees_pages() const override { return frees_; }
  int64_t b_;
  bool side_, frees_;
};

std::unique_ptr<CachedBlock> block(bool side = true, bool frees = true) {
  return std::make_unique<FakeBlock>(100, side, frees);
}

TEST(PrefixCache, HashesAreChainedAndSalted) {
  std::vector<int32_t> t(40);
  std::iota(t.begin(), t.end(), 0);
  auto h = prefix_block_hashes(t, 16, 0);
  ASSERT_EQ(h.size(), 2u);  // the partial third block has no hash
  EXPECT_NE(h[0], h[1]);
  EXPECT_NE(prefix_block_hashes(t, 16, 7)[0], h[0]);
  std::vector<int32_t> u = t;
  u[3] = 999;  // a change in block 1 changes every later hash
  EXPECT_NE(prefix_block_hashes(u, 16, 0)[1], h[1]);
}

TEST(PrefixCache, MatchesTheLongestChainAndBacksOffToASideObject) {
  PrefixCache c;
  c.insert(11, 0, 1, block());
  c.insert(12, 11, 2, block(/*side=*/false));
  c.insert(13, 12, 3, block());
  const std::vector<uint64_t> hashes = {11, 12, 13, 14};
  EXPECT_EQ(c.match(hashes, 10, false).size(), 3u);
  EXPECT_EQ(c.match(hashes, 2, false).size(), 2u);
  EXPECT_EQ(c.match(hashes, 2, true).size(), 1u);  // block 2 has no side object
  EXPECT_EQ(c.match(std::vector<uint64_t>{12, 13}, 10, false).size(), 0u);  // not block 1
  EXPECT_EQ(c.bytes(), 300);
  EXPECT_EQ(c.blocks(), 3);
}

TEST(PrefixCache, EvictsLeavesLeastRecentlyUsedFirst) {
  PrefixCache c;
  c.insert(1, 0, 1, block());
  c.insert(2, 1, 2, block());
  c.insert(3, 0, 1, block(true, /*frees=*/false));
  c.touch(1);
  c.touch(2);                      // chain 1-2 is newer than block 3
  ASSERT_TRUE(c.evict_one(true));  // 3 is older but frees no page: leaf 2 goes
  EXPECT_FALSE(c.contains(2));
  EXPECT_TRUE(c.contains(1));  // 1 was not a leaf until now
  EXPECT_TRUE(c.contains(3));
  ASSERT_TRUE(c.evict_one(false));  // the least recently used leaf: 3
  EXPECT_FALSE(c.contains(3));
  ASSERT_TRUE(c.evict_one(false));
  EXPECT_EQ(c.blocks(), 0);
  EXPECT_FALSE(c.evict_one(false));
  EXPECT_EQ(c.bytes(), 0);
}

}  // namespace
}  // namespace fathom::kv
