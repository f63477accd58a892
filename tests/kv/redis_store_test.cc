// The Redis Cluster tier's pure parts: hash slots as Redis computes them (CRC16/XMODEM mod
// 16384, hash tags) and the node list flag; and get_many() against a real two-master cluster
// started here on loopback (redis-server, redis-cli): answers in order, one pipelined round trip
// per master, ASK during a slot migration and MOVED after it followed per key, a hit's expiry
// raised to the reader's class and never lowered. The tier under
// the server is tests/serve/kv_store_redis_test.js.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

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

// No node answering is an outage, not a mistake: the store opens (the server starts) and its
// reads miss and report the failure, until a node answers.
TEST(RedisClusterStore, NoReachableNodeOpensWithoutThem) {
  RedisStoreOptions o;
  o.nodes = {"127.0.0.1:1"};
  o.timeout_ms = 200;
  auto opened = RedisClusterStore::open(o);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  const StoreKey k{1, 2};
  EXPECT_FALSE((*opened)->contains(k));
  auto r = (*opened)->get(k, kDefaultRetention);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().to_string();
}

// The output of a shell command (a redis-cli call), trimmed.
std::string sh(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Two redis-server masters on loopback in cluster mode: A owns slots 0-8191, B the rest.
class RedisClusterStoreLive : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("fathom_redis_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    // Below Linux's ephemeral range (32768 up), bus ports (+10000) included: another test's
    // outgoing connections cannot hold them.
    const int base = 10000 + int(::getpid() % 2500) * 2;
    ports_ = {base, base + 1};
    for (int port : ports_) {
      const std::string d = (dir_ / std::to_string(port)).string();
      std::filesystem::create_directories(d);
      const pid_t pid = ::fork();
      if (pid == 0) {
        const std::string p = std::to_string(port);
        ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1",
                 "--dir", d.c_str(), "--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--cluster-announce-ip", "127.0.0.1",
                 "--logfile", "log", static_cast<char*>(nullptr));
        ::_exit(127);
      }
      pids_.push_back(pid);
    }
    for (int port : ports_)
      ASSERT_TRUE(wait_for(cli(port, "PING"), "PONG"))
          << port << ": " << sh("tail -5 " + (dir_ / std::to_string(port) / "log").string());
    sh(cli(ports_[0], "CLUSTER ADDSLOTSRANGE 0 8191"));
    sh(cli(ports_[1], "CLUSTER ADDSLOTSRANGE 8192 16383"));
    sh(cli(ports_[0], "CLUSTER MEET 127.0.0.1 " + std::to_string(ports_[1])));
    for (int port : ports_)
      ASSERT_TRUE(wait_for(cli(port, "CLUSTER INFO"), "cluster_state:ok")) << port;
    // Both must see both masters' slots before a client reads the map from A.
    ASSERT_TRUE(wait_for(cli(ports_[0], "CLUSTER SLOTS"), std::to_string(ports_[1])));
    ids_ = {sh(cli(ports_[0], "CLUSTER MYID")), sh(cli(ports_[1], "CLUSTER MYID"))};
  }
  void TearDown() override {
    for (pid_t pid : pids_) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  static std::string cli(int port, const std::string& args) {
    return "redis-cli -p " + std::to_string(port) + " " + args;
  }
  static bool wait_for(const std::string& cmd, const std::string& want) {
    for (int i = 0; i < 200; ++i) {
      if (sh(cmd).find(want) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // A key whose object lands in A's slots (`on_a`) or B's.
  static StoreKey key_on(bool on_a, uint64_t from) {
    for (uint64_t i = from;; ++i) {
      const StoreKey k{i, 0x5eed};
      if ((redis_cluster_slot("fkv:" + k.hex()) < 8192) == on_a) return k;
    }
  }
  std::filesystem::path dir_;
  std::vector<int> ports_;
  std::vector<pid_t> pids_;
  std::vector<std::string> ids_;
};

// A node that answers but is not in cluster mode is a mistake in the flag: open() says so.
TEST_F(RedisClusterStoreLive, AServerOutOfClusterModeIsRefused) {
  // Beside the clusters' ports (10000-14999, buses 20000-24999), below the ephemeral range.
  const int port = 15000 + int(::getpid() % 2000);
  const std::string d = (dir_ / "plain").string();
  std::filesystem::create_directories(d);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string p = std::to_string(port);
    ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--dir",
             d.c_str(), "--save", "", "--appendonly", "no", "--logfile", "log",
             static_cast<char*>(nullptr));
    ::_exit(127);
  }
  pids_.push_back(pid);
  ASSERT_TRUE(wait_for(cli(port, "PING"), "PONG"));
  RedisStoreOptions o;
  o.nodes = {"127.0.0.1:" + std::to_string(port)};
  auto opened = RedisClusterStore::open(o);
  ASSERT_FALSE(opened.is_ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opened.status().message().find("not a Redis Cluster"), std::string::npos)
      << opened.status().message();
}

// Something other than a string under an object's key (anyone with access may write one) is
// a damaged object: the read says kCorrupt and deletes it, so the block is written again,
// where a WRONGTYPE read as an I/O error kept the key (and raised its time to live) for good.
TEST_F(RedisClusterStoreLive, AKeyOfAnotherTypeIsDamagedAndDeleted) {
  RedisStoreOptions o;
  o.nodes = {"127.0.0.1:" + std::to_string(ports_[0])};
  auto opened = RedisClusterStore::open(o);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  RedisClusterStore& s = **opened;
  const StoreKey a = key_on(true, 100), b = key_on(true, a.lo + 1);
  for (const StoreKey& k : {a, b}) sh(cli(ports_[0], "RPUSH fkv:" + k.hex() + " x"));
  auto many = s.get_many(std::vector<StoreKey>{a}, kDefaultRetention);
  ASSERT_EQ(many.size(), 1u);
  ASSERT_FALSE(many[0].is_ok());
  EXPECT_EQ(many[0].status().code(), StatusCode::kCorrupt) << many[0].status().to_string();
  auto one = s.get(b, kDefaultRetention);
  ASSERT_FALSE(one.is_ok());
  EXPECT_EQ(one.status().code(), StatusCode::kCorrupt) << one.status().to_string();
  for (const StoreKey& k : {a, b}) EXPECT_EQ(sh(cli(ports_[0], "EXISTS fkv:" + k.hex())), "0");
  ASSERT_TRUE(s.put(a, "value", kDefaultRetention));
  s.flush();
  auto again = s.get(a, kDefaultRetention);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(*again, "value");
}

TEST_F(RedisClusterStoreLive, GetManyPipelinesPerMasterAndFollowsAskAndMoved) {
  RedisStoreOptions o;
  o.nodes = {"127.0.0.1:" + std::to_string(ports_[0])};
  o.timeout_ms = 2000;
  auto opened = RedisClusterStore::open(o);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  RedisClusterStore& s = **opened;
  std::vector<StoreKey> keys;
  for (int i = 0; i < 24; ++i)
    keys.push_back(key_on(i % 2 == 0, keys.empty() ? 1 : keys.back().lo + 1));
  for (size_t i = 0; i < keys.size(); ++i)
    ASSERT_TRUE(s.put(keys[i], "value " + std::to_string(i), kDefaultRetention));
  s.flush();
  ASSERT_EQ(s.stats().writes, 24);
  std::vector<StoreKey> ask = keys;
  ask.insert(ask.begin() + 5, key_on(true, 100000));  // never written: a miss in its place
  const int64_t trips0 = s.stats().round_trips;
  std::vector<Result<std::string>> got = s.get_many(ask, kDefaultRetention);
  ASSERT_EQ(got.size(), ask.size());
  for (size_t i = 0, v = 0; i < ask.size(); ++i) {
    if (i == 5) {
      EXPECT_EQ(got[i].status().code(), StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(got[i].is_ok()) << i << ": " << got[i].status().to_string();
    EXPECT_EQ(*got[i], "value " + std::to_string(v++));
  }
  EXPECT_EQ(s.stats().round_trips - trips0, 2);  // one pipeline to each master
  EXPECT_EQ(s.stats().hits, 24);
  EXPECT_EQ(s.stats().misses, 1);
  // Latencies: the 24 writes (of the default class), and the one get_many as one read.
  const RetentionClass chat = *RetentionPolicy().find("chat");
  EXPECT_EQ(s.stats().classes[chat].write_seconds.count, 24);
  EXPECT_EQ(s.stats().classes[chat].read_seconds.count, 1);
  EXPECT_GT(s.stats().classes[chat].read_seconds.sum, 0);

  // Migrating keys[0]'s slot from A to B, with the key already moved: A answers ASK for it.
  const std::string k0 = "fkv:" + keys[0].hex();
  const std::string slot = std::to_string(redis_cluster_slot(k0));
  sh(cli(ports_[1], "CLUSTER SETSLOT " + slot + " IMPORTING " + ids_[0]));
  sh(cli(ports_[0], "CLUSTER SETSLOT " + slot + " MIGRATING " + ids_[1]));
  ASSERT_EQ(
      sh(cli(ports_[0], "MIGRATE 127.0.0.1 " + std::to_string(ports_[1]) + " " + k0 + " 0 5000")),
      "OK");
  const int64_t redirects0 = s.stats().redirects;
  got = s.get_many(std::vector<StoreKey>{keys[0], keys[1], keys[2]}, kDefaultRetention);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].is_ok()) << i << ": " << got[i].status().to_string();
    EXPECT_EQ(*got[i], "value " + std::to_string(i));
  }
  EXPECT_EQ(s.stats().redirects - redirects0, 1);
  // The migration ends: B owns the slot; the client's map still says A, which answers MOVED.
  for (int port : ports_) sh(cli(port, "CLUSTER SETSLOT " + slot + " NODE " + ids_[1]));
  got = s.get_many(std::vector<StoreKey>{keys[0]}, kDefaultRetention);
  ASSERT_TRUE(got[0].is_ok()) << got[0].status().to_string();
  EXPECT_EQ(*got[0], "value 0");
  EXPECT_EQ(s.stats().redirects - redirects0, 2);
  // The map learnt it: no redirect the next time, one round trip.
  const int64_t trips1 = s.stats().round_trips;
  got = s.get_many(std::vector<StoreKey>{keys[0]}, kDefaultRetention);
  ASSERT_TRUE(got[0].is_ok());
  EXPECT_EQ(s.stats().redirects - redirects0, 2);
  EXPECT_EQ(s.stats().round_trips - trips1, 1);
  EXPECT_TRUE(s.get_many({}, kDefaultRetention).empty());
}

// contains_many() is get_many()'s pipeline with EXISTS: one round trip to each master for any
// number of keys, the answers in the order asked (a key written, one never written, one whose
// write is still queued), and contains() is one of them.
TEST_F(RedisClusterStoreLive, ContainsManyAsksEachMasterOnce) {
  RedisStoreOptions o;
  o.nodes = {"127.0.0.1:" + std::to_string(ports_[0])};
  auto opened = RedisClusterStore::open(o);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  RedisClusterStore& s = **opened;
  std::vector<StoreKey> ask;
  for (int i = 0; i < 20; ++i)
    ask.push_back(key_on(i % 2 == 0, ask.empty() ? 1 : ask.back().lo + 1));
  for (size_t i = 0; i < ask.size(); i += 3) ASSERT_TRUE(s.put(ask[i], "v", kDefaultRetention));
  s.flush();
  const int64_t trips0 = s.stats().round_trips;
  const std::vector<bool> held = s.contains_many(ask);
  ASSERT_EQ(held.size(), ask.size());
  for (size_t i = 0; i < ask.size(); ++i) {
    EXPECT_EQ(held[i], i % 3 == 0) << i;
    // Redis's own answer.
    EXPECT_EQ(sh(cli(ports_[i % 2 == 0 ? 0 : 1], "EXISTS fkv:" + ask[i].hex())),
              held[i] ? "1" : "0")
        << i;
  }
  EXPECT_EQ(s.stats().round_trips - trips0, 2);
  EXPECT_TRUE(s.contains(ask[3]));
  EXPECT_FALSE(s.contains(ask[4]));
  EXPECT_EQ(s.stats().round_trips - trips0, 4);
  EXPECT_TRUE(s.contains_many({}).empty());
}

// A hit raises the key's time to live to the reader's class's and never lowers it (PEXPIRE GT),
// a key without one gets it (PEXPIRE NX), and a miss sets nothing; for get() and get_many(),
// on the key's own master and through an ASK. The truth is the PTTL Redis itself reports.
TEST_F(RedisClusterStoreLive, AHitRaisesTheTimeToLiveToTheReadersClassAndNeverLowersIt) {
  RedisStoreOptions o;
  o.nodes = {"127.0.0.1:" + std::to_string(ports_[0])};
  o.timeout_ms = 2000;
  auto opened = RedisClusterStore::open(o);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  RedisClusterStore& s = **opened;
  const RetentionClass agent = *o.retention.find("agent"), chat = *o.retention.find("chat");
  const int64_t agent_ms = o.retention.ttl_ms(agent), chat_ms = o.retention.ttl_ms(chat);
  const StoreKey a = key_on(true, 1), b = key_on(false, 1);
  const std::string ka = "fkv:" + a.hex(), kb = "fkv:" + b.hex();
  const int pa = ports_[0], pb = ports_[1];
  auto pttl = [](int port, const std::string& k) { return std::stoll(sh(cli(port, "PTTL " + k))); };
  ASSERT_TRUE(s.put(a, "a", agent));
  ASSERT_TRUE(s.put(b, "b", agent));
  s.flush();
  ASSERT_EQ(s.stats().writes, 2);
  EXPECT_GT(pttl(pa, ka), agent_ms - 60000);
  EXPECT_LE(pttl(pa, ka), agent_ms);

  // A chat hit raises agent's 3 days to 7.
  auto got = s.get_many(std::vector<StoreKey>{a, b}, chat);
  ASSERT_TRUE(got[0].is_ok() && got[1].is_ok());
  EXPECT_EQ(*got[0], "a");
  EXPECT_GT(pttl(pa, ka), chat_ms - 60000);
  EXPECT_GT(pttl(pb, kb), chat_ms - 60000);
  // An agent hit leaves the 7 days as they are.
  ASSERT_TRUE(s.get(a, agent).is_ok());
  ASSERT_TRUE(s.get_many(std::vector<StoreKey>{b}, agent)[0].is_ok());
  EXPECT_GT(pttl(pa, ka), chat_ms - 60000);
  EXPECT_GT(pttl(pb, kb), chat_ms - 60000);
  // A cut time to live is raised back to the reader's class's; one without any gets it.
  sh(cli(pa, "PEXPIRE " + ka + " 5000"));
  sh(cli(pb, "PERSIST " + kb));
  ASSERT_EQ(pttl(pb, kb), -1);
  ASSERT_TRUE(s.get(a, agent).is_ok());
  ASSERT_TRUE(s.get_many(std::vector<StoreKey>{b}, agent)[0].is_ok());
  EXPECT_GT(pttl(pa, ka), agent_ms - 60000);
  EXPECT_LE(pttl(pa, ka), agent_ms);
  EXPECT_GT(pttl(pb, kb), agent_ms - 60000);
  EXPECT_LE(pttl(pb, kb), agent_ms);
  // A miss creates nothing.
  const StoreKey never = key_on(true, 100000);
  EXPECT_EQ(s.get(never, chat).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sh(cli(pa, "EXISTS fkv:" + never.hex())), "0");

  // Through an ASK (the key migrated to B mid-migration): the expiry is raised there too.
  sh(cli(pa, "PEXPIRE " + ka + " 5000"));  // MIGRATE keeps it
  const std::string slot = std::to_string(redis_cluster_slot(ka));
  sh(cli(pb, "CLUSTER SETSLOT " + slot + " IMPORTING " + ids_[0]));
  sh(cli(pa, "CLUSTER SETSLOT " + slot + " MIGRATING " + ids_[1]));
  ASSERT_EQ(sh(cli(pa, "MIGRATE 127.0.0.1 " + std::to_string(pb) + " " + ka + " 0 5000")), "OK");
  const int64_t redirects0 = s.stats().redirects;
  got = s.get_many(std::vector<StoreKey>{a}, chat);
  ASSERT_TRUE(got[0].is_ok()) << got[0].status().to_string();
  EXPECT_EQ(*got[0], "a");
  EXPECT_EQ(s.stats().redirects - redirects0, 1);
  for (int port : ports_) sh(cli(port, "CLUSTER SETSLOT " + slot + " NODE " + ids_[1]));
  EXPECT_GT(pttl(pb, ka), chat_ms - 60000);
}

}  // namespace
}  // namespace fathom::kv
