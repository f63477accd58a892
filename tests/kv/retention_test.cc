// Retention classes: the --retention syntax (and what it rejects), the default class, the
// cache_control mapping; and the disk tier's enforcement with a test clock: an object expires
// at its last use plus its class's time to live (agent before chat), a hit refreshes it and a
// longer class's use moves it into that class, expiry survives reopening the directory (the
// index is rebuilt from file modification times), the byte budget evicts the soonest to
// expire, and strange class directories are left alone.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kv/clock.h"
#include "kv/disk_store.h"
#include "kv/retention.h"

namespace fathom::kv {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kSec = 1000, kDay = 86400 * kSec;

TEST(KvRetentionPolicy, DefaultsAreDeepSeeks) {
  RetentionPolicy p;
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p.ttl_ms(*p.find("agent")), 3 * kDay);
  EXPECT_EQ(p.ttl_ms(*p.find("chat")), 7 * kDay);
  EXPECT_EQ(p.name(p.default_class()), "chat");
  EXPECT_EQ(p.name(kDefaultRetention), "chat");
  EXPECT_EQ(p.to_string(), "agent=3d,chat=7d");
}

TEST(KvRetentionPolicy, ParsesAndOrdersByTimeToLive) {
  auto p = RetentionPolicy::parse("long=2h,chat=7d,short=90s,mid_1=15m");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 4u);
  EXPECT_EQ(p->classes()[0].name, "short");
  EXPECT_EQ(p->classes()[0].ttl_ms, 90 * kSec);
  EXPECT_EQ(p->classes()[1].name, "mid_1");
  EXPECT_EQ(p->classes()[2].ttl_ms, 2 * 3600 * kSec);
  EXPECT_EQ(p->name(p->default_class()), "chat");
  EXPECT_FALSE(p->find("other").has_value());
  // Without chat the default is the first class given, whatever its time to live.
  auto q = RetentionPolicy::parse("b=1d,a=1h");
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->name(q->default_class()), "b");
}

TEST(KvRetentionPolicy, AcceptsUpToAHundredYears) {
  for (const char* good :
       {"agent=36500d", "agent=876000h", "agent=52560000m", "agent=3153600000s"}) {
    auto p = RetentionPolicy::parse(good);
    ASSERT_TRUE(p.is_ok()) << good << ": " << p.status().to_string();
    EXPECT_EQ(p->ttl_ms(p->default_class()), int64_t(3153600000) * 1000) << good;
  }
}

TEST(KvRetentionPolicy, RejectsBadSyntax) {
  for (const char* bad :
       {"", "agent", "agent=", "=3d", "agent=3", "agent=d", "agent=3w", "agent=0s", "agent=-1d",
        "Agent=3d", "1agent=3d", "ag-ent=3d", "agent=3d,", ",agent=3d", "agent=3d,agent=4d",
        "agent=3d;chat=7d", "agent=3.5d", "agent= 3d", "agent=99999999999999999999d",
        // Over 100 years in any unit (3153600000d was taken: 8.6 million years, which Redis's
        // put script then wrote as 1e+17 and SET refused).
        "agent=3153600000d", "agent=36501d", "agent=876001h", "agent=52560001m",
        "agent=3153600001s"}) {
    auto p = RetentionPolicy::parse(bad);
    EXPECT_FALSE(p.is_ok()) << "'" << bad << "' was accepted";
    if (!p.is_ok()) {
      EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(KvRetentionPolicy, CacheControlTtlPicksTheSmallestClassThatKeepsItLongEnough) {
  auto p = RetentionPolicy::parse("agent=3s,chat=1h");
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->name(p->for_ttl(5 * 60 * kSec)), "chat");    // 5m: agent (3 s) is too short
  EXPECT_EQ(p->name(p->for_ttl(3600 * kSec)), "chat");      // 1h: exactly chat
  EXPECT_EQ(p->name(p->for_ttl(2 * 3600 * kSec)), "chat");  // longer than any: the longest
  EXPECT_EQ(p->name(p->for_ttl(2 * kSec)), "agent");
  RetentionPolicy d;
  EXPECT_EQ(d.name(d.for_ttl(3600 * kSec)), "agent");
}

class DiskStoreRetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fathom_disk_retention_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<DiskStore> open(int64_t budget = int64_t(1) << 30) {
    DiskStoreOptions o;
    o.dir = dir_.string();
    o.budget_bytes = budget;
    o.clock = &clock_;
    auto s = DiskStore::open(o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return std::move(*s);
  }
  static StoreKey key(uint64_t i) { return store_key(Fingerprint{1, 2}, i, ObjectKind::kBlock); }
  static void put(DiskStore& s, uint64_t i, RetentionClass c, size_t bytes = 100) {
    ASSERT_TRUE(s.put(key(i), std::string(bytes, char('a' + i % 26)), c));
    s.flush();
  }
  static bool hit(DiskStore& s, uint64_t i, RetentionClass c) { return s.get(key(i), c).is_ok(); }
  // The class directory the object's file is in ("" when there is none).
  std::string file_class(uint64_t i) const {
    for (const char* c : {"agent", "chat"}) {
      const std::string h = key(i).hex();
      if (fs::exists(dir_ / ("class-" + std::string(c)) / h.substr(0, 2) / (h + ".fkv"))) return c;
    }
    return "";
  }
  fs::path dir_;
  TestClock clock_{int64_t(1700000000) * kSec};
  const RetentionClass agent_ = *RetentionPolicy().find("agent");
  const RetentionClass chat_ = *RetentionPolicy().find("chat");
};

TEST_F(DiskStoreRetentionTest, AgentObjectsExpireBeforeChatObjects) {
  auto s = open();
  put(*s, 1, agent_);
  put(*s, 2, chat_);
  EXPECT_EQ(file_class(1), "agent");
  EXPECT_EQ(file_class(2), "chat");
  clock_.advance_ms(3 * kDay - 1);  // contains() does not refresh
  EXPECT_TRUE(s->contains(key(1)));
  EXPECT_TRUE(s->contains(key(2)));
  clock_.advance_ms(2);  // past 3 days: the agent object is gone, the chat one still hits
  EXPECT_FALSE(s->contains(key(1)));
  EXPECT_EQ(s->get(key(1), agent_).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(file_class(1), "");
  EXPECT_TRUE(s->contains(key(2)));
  clock_.advance_ms(4 * kDay);  // past 7 days: both gone
  EXPECT_FALSE(s->contains(key(2)));
  EXPECT_EQ(s->get(key(2), chat_).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(file_class(2), "");
  const StoreStats st = s->stats();
  EXPECT_EQ(st.expirations, 2);
  EXPECT_EQ(st.evictions, 0);
  EXPECT_EQ(st.objects, 0);
  EXPECT_EQ(st.bytes, 0);
  ASSERT_EQ(st.classes.size(), 2u);
  EXPECT_EQ(st.classes[agent_].name, "agent");
  EXPECT_EQ(st.classes[agent_].expirations, 1);
  EXPECT_EQ(st.classes[chat_].expirations, 1);
  EXPECT_EQ(st.classes[agent_].bytes_written, 100);
  EXPECT_EQ(st.classes[chat_].bytes_written, 100);
  EXPECT_EQ(st.classes[agent_].misses, 1);
  EXPECT_EQ(st.classes[chat_].misses, 1);
}

// The latency histograms: a value equal to a bucket's bound counts in that bucket, past the
// last bound in +Inf; the disk tier observes one read per get (hit or miss) by the asking
// request's class and one write per object by the object's class, on the steady clock (the
// test clock does not move while they are measured).
TEST(KvLatencyHistogram, BucketsByUpperBound) {
  LatencyHistogram h;
  h.observe(0);
  h.observe(LatencyHistogram::kBounds[0]);
  h.observe(LatencyHistogram::kBounds[0] * 1.01);
  h.observe(LatencyHistogram::kBounds.back() + 1);
  EXPECT_EQ(h.counts[0], 2);
  EXPECT_EQ(h.counts[1], 1);
  EXPECT_EQ(h.counts.back(), 1);
  EXPECT_EQ(h.count, 4);
  EXPECT_DOUBLE_EQ(h.sum,
                   LatencyHistogram::kBounds[0] * 2.01 + LatencyHistogram::kBounds.back() + 1);
  LatencyHistogram m;
  m.merge(h);
  m.merge(h);
  EXPECT_EQ(m.counts[0], 4);
  EXPECT_EQ(m.count, 8);
}

TEST_F(DiskStoreRetentionTest, ReadsAndWritesAreTimedByClass) {
  auto s = open();
  put(*s, 1, agent_);
  put(*s, 2, chat_);
  put(*s, 3, chat_);
  EXPECT_TRUE(hit(*s, 1, chat_));    // a chat request's read (moves the object into chat)
  EXPECT_FALSE(hit(*s, 9, agent_));  // a miss is a read too
  EXPECT_TRUE(hit(*s, 2, agent_));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.classes[agent_].write_seconds.count, 1);
  EXPECT_EQ(st.classes[chat_].write_seconds.count, 2);
  EXPECT_EQ(st.classes[agent_].read_seconds.count, 2);
  EXPECT_EQ(st.classes[chat_].read_seconds.count, 1);
  EXPECT_GT(st.classes[chat_].write_seconds.sum, 0);
  int64_t in_buckets = 0;
  for (int64_t c : st.classes[agent_].read_seconds.counts) in_buckets += c;
  EXPECT_EQ(in_buckets, 2);
}

TEST_F(DiskStoreRetentionTest, AHitRefreshesTheExpiry) {
  auto s = open();
  put(*s, 1, agent_);
  put(*s, 2, agent_);
  clock_.advance_ms(2 * kDay);
  EXPECT_TRUE(hit(*s, 1, agent_));  // expires 3 days from now, not 1
  clock_.advance_ms(2 * kDay);
  EXPECT_TRUE(s->contains(key(1)));
  EXPECT_FALSE(s->contains(key(2)));  // not used: gone after 3 days
  EXPECT_TRUE(hit(*s, 1, agent_));
  clock_.advance_ms(3 * kDay + 1);
  EXPECT_FALSE(hit(*s, 1, agent_));
  EXPECT_EQ(s->stats().classes[agent_].hits, 2);
}

TEST_F(DiskStoreRetentionTest, ALongerClassKeepsTheObjectLongerAndAShorterOneNeverShortens) {
  auto s = open();
  put(*s, 1, agent_);
  EXPECT_TRUE(hit(*s, 1, chat_));  // a chat request used it: it is a chat object now
  EXPECT_EQ(file_class(1), "chat");
  EXPECT_EQ(s->class_of(key(1)), chat_);
  put(*s, 2, agent_);
  put(*s, 2, chat_);  // re-put by a longer class
  EXPECT_EQ(file_class(2), "chat");
  put(*s, 3, chat_);
  put(*s, 3, agent_);  // re-put by a shorter class: stays chat
  EXPECT_TRUE(hit(*s, 3, agent_));
  EXPECT_EQ(file_class(3), "chat");
  clock_.advance_ms(3 * kDay + 1);
  for (uint64_t i : {1, 2, 3}) EXPECT_TRUE(s->contains(key(i))) << i;
  clock_.advance_ms(4 * kDay);
  for (uint64_t i : {1, 2, 3}) EXPECT_FALSE(s->contains(key(i))) << i;
  for (const auto& e : fs::recursive_directory_iterator(dir_))
    EXPECT_NE(e.path().extension(), ".fkv") << e.path();  // no copy left behind in agent
}

TEST_F(DiskStoreRetentionTest, ExpirySurvivesReopeningTheDirectory) {
  {
    auto s = open();
    put(*s, 1, agent_);
    put(*s, 2, chat_);
    put(*s, 3, chat_);
  }
  clock_.advance_ms(1 * kDay);
  {
    auto s = open();  // rebuilt from the files: every object, nothing expired
    EXPECT_EQ(s->stats().objects, 3);
    EXPECT_EQ(s->stats().expirations, 0);
    EXPECT_EQ(s->class_of(key(1)), agent_);
    EXPECT_EQ(s->class_of(key(2)), chat_);
  }
  clock_.advance_ms(2 * kDay + 1);  // 3 days after the writes
  {
    auto s = open();  // the agent object is found expired at start-up and removed
    EXPECT_EQ(s->stats().objects, 2);
    EXPECT_EQ(s->stats().expirations, 1);
    EXPECT_EQ(s->stats().classes[agent_].expirations, 1);
    EXPECT_FALSE(s->contains(key(1)));
    EXPECT_EQ(file_class(1), "");
    EXPECT_TRUE(hit(*s, 2, chat_));  // refreshed: 7 days from now, written to the file
  }
  clock_.advance_ms(5 * kDay);  // 8 days after the writes, 5 after object 2's hit
  {
    auto s = open();
    EXPECT_TRUE(s->contains(key(2)));
    EXPECT_FALSE(s->contains(key(3)));
    EXPECT_EQ(s->stats().objects, 1);
  }
}

TEST_F(DiskStoreRetentionTest, TheBudgetEvictsTheSoonestToExpire) {
  auto s = open(3000);
  put(*s, 1, agent_, 1000);  // expires at t + 3 d
  put(*s, 2, chat_, 1000);   // t + 7 d
  clock_.advance_ms(kSec);
  put(*s, 3, agent_, 1000);  // t + 1 s + 3 d
  put(*s, 4, chat_, 1000);   // over budget: object 1 expires soonest
  EXPECT_FALSE(s->contains(key(1)));
  EXPECT_TRUE(s->contains(key(2)));
  put(*s, 5, chat_, 1000);  // then object 3: the older chat object 2 outlives it
  EXPECT_FALSE(s->contains(key(3)));
  EXPECT_TRUE(s->contains(key(2)));
  EXPECT_TRUE(s->contains(key(4)));
  EXPECT_TRUE(s->contains(key(5)));
  clock_.advance_ms(kSec);
  EXPECT_TRUE(hit(*s, 2, chat_));  // within a class: least recently used first
  put(*s, 6, chat_, 1000);
  EXPECT_FALSE(s->contains(key(4)));
  EXPECT_TRUE(s->contains(key(2)));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.evictions, 3);
  EXPECT_EQ(st.expirations, 0);
  EXPECT_EQ(st.classes[agent_].evictions, 2);
  EXPECT_EQ(st.classes[chat_].evictions, 1);
  EXPECT_LE(st.bytes, 3000);
  // Expired objects go before any eviction, and count as expirations.
  clock_.advance_ms(7 * kDay);
  put(*s, 7, agent_, 1000);
  EXPECT_EQ(s->stats().expirations, 3);
  EXPECT_EQ(s->stats().evictions, 3);
  EXPECT_EQ(s->stats().objects, 1);
}

TEST_F(DiskStoreRetentionTest, StrangeClassDirectoriesAreLeftAloneAndTheOldLayoutIsMoved) {
  {
    auto s = open();
    put(*s, 1, chat_);
  }
  const std::string h1 = key(1).hex(), h2 = key(2).hex(), h3 = key(3).hex(), h4 = key(4).hex();
  // A class no longer configured: its valid object is neither used nor deleted.
  fs::create_directories(dir_ / "class-gold" / h2.substr(0, 2));
  std::ofstream(dir_ / "class-gold" / h2.substr(0, 2) / (h2 + ".fkv")) << "gold";
  // Garbage where classes live.
  fs::create_directories(dir_ / "class-" / h3.substr(0, 2));
  std::ofstream(dir_ / "class-" / h3.substr(0, 2) / (h3 + ".fkv")) << "no class";
  std::ofstream(dir_ / "class-agent2") << "a file, not a directory";
  fs::create_directories(dir_ / "class-agent" / "zz");
  std::ofstream(dir_ / "class-agent" / "zz" / "nothex.fkv") << "no";
  std::ofstream(dir_ / "class-agent" / "ab") << "a file where a shard belongs";
  fs::create_directories(dir_ / "class-agent" / "00");
  std::ofstream(dir_ / "class-agent" / "00" / (h3 + ".fkv")) << "in the wrong shard";
  // The same object in two classes (a crash mid-move): the longer class keeps it.
  fs::create_directories(dir_ / "class-agent" / h1.substr(0, 2));
  std::ofstream(dir_ / "class-agent" / h1.substr(0, 2) / (h1 + ".fkv")) << "older copy";
  // An old-layout copy of an object the default class holds: the class's copy is kept.
  fs::create_directories(dir_ / h1.substr(0, 2));
  std::ofstream(dir_ / h1.substr(0, 2) / (h1 + ".fkv")) << "old layout copy";
  // The layout before retention classes: moved into the default class, its last use kept.
  fs::create_directories(dir_ / h4.substr(0, 2));
  const fs::path old = dir_ / h4.substr(0, 2) / (h4 + ".fkv");
  std::ofstream(old) << "legacy";
  const int64_t used = clock_.now_ms() - 6 * kDay;
  const timespec t[2] = {{0, UTIME_OMIT}, {time_t(used / 1000), 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old.c_str(), t, 0), 0);

  auto s = open();
  EXPECT_EQ(s->stats().objects, 2);
  EXPECT_EQ(s->class_of(key(1)), chat_);
  EXPECT_EQ(*s->get(key(1), chat_), std::string(100, 'b'));
  EXPECT_FALSE(fs::exists(dir_ / "class-agent" / h1.substr(0, 2) / (h1 + ".fkv")));
  EXPECT_FALSE(fs::exists(dir_ / h1.substr(0, 2) / (h1 + ".fkv")));
  EXPECT_FALSE(s->contains(key(2)));
  EXPECT_FALSE(s->contains(key(3)));
  EXPECT_TRUE(fs::exists(dir_ / "class-gold" / h2.substr(0, 2) / (h2 + ".fkv")));
  EXPECT_TRUE(fs::exists(dir_ / "class-agent2"));
  EXPECT_FALSE(fs::exists(old));
  EXPECT_EQ(file_class(4), "chat");
  EXPECT_TRUE(s->contains(key(4)));
  clock_.advance_ms(1 * kDay + kSec);  // 7 days after its last use under the old layout
  EXPECT_FALSE(s->contains(key(4)));
}

}  // namespace
}  // namespace fathom::kv
