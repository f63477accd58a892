// The Redis Cluster tier's pure parts: hash slots as Redis computes them (CRC16/XMODEM mod
// 16384, hash tags) and the node list flag. The tier against a real cluster is
// tests/serve/kv_store_redis_test.js.
#include <gtest/gtest.h>

#include "kv/redis_store.h"

namespace fathom::kv {
namespace {

TEST(RedisClusterSlot, MatchesRedis) {
  // CRC16/XMODEM("123456789") = 0x31C3 (the check value in Redis's cluster spec).
  EXPECT_EQ(redis_cluster_slot("123456789"), 0x31C3 % 16384);
  EXPECT_EQ(redis_cluster_slot("foo"), 12182);  // CLUSTER KEYSLOT foo
  EXPECT_EQ(redis_cluster_slot("bar"), 5061);   // CLUSTER KEYSLOT bar
  // Hash tags: only the part between the first { and the next } counts.
  EXPECT_EQ(redis_cluster_slot("{user1000}.following"), redis_cluster_slot("user1000"));
  EXPECT_EQ(redis_cluster_slot("{user1000}.followers"), redis_cluster_slot("user1000"));
  EXPECT_EQ(redis_cluster_slot("foo{}{bar}"), redis_cluster_slot("foo{}{bar}"));
  EXPECT_NE(redis_cluster_slot("foo{}{bar}"), redis_cluster_slot("bar"));  // empty tag: whole key
  EXPECT_EQ(redis_cluster_slot("foo{{bar}}zap"), redis_cluster_slot("{bar"));
}

TEST(RedisNodes, ParsesTheFlag) {
  auto one = parse_redis_nodes("127.0.0.1:7000");
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(*one, std::vector<std::string>{"127.0.0.1:7000"});
  auto three = parse_redis_nodes("a:1,b:2,c.example:65535");
  ASSERT_TRUE(three.is_ok());
  EXPECT_EQ(three->size(), 3u);
  for (const char* bad : {"", "host", "host:", ":80", "h:0", "h:65536", "h:8x", "a:1,", "a:1,,b:2"})
    EXPECT_FALSE(parse_redis_nodes(bad).is_ok()) << bad;
}

TEST(RedisClusterStore, NoReachableNodeFailsToOpen) {
  RedisStoreOptions o;
  o.nodes = {"127.0.0.1:1"};
  o.timeout_ms = 200;
  EXPECT_EQ(RedisClusterStore::open(o).status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace fathom::kv
