// The disk tier: objects survive reopening (the index is rebuilt from the directory), the
// byte budget evicts the least recently used, a full write queue drops instead of blocking,
// interrupted writes leave nothing behind, and damaged files come back as bytes for the
// reader to reject (the store never interprets them).
#include "kv/disk_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fathom::kv {
namespace {

namespace fs = std::filesystem;

class DiskStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fathom_disk_store_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<DiskStore> open(int64_t budget, int64_t queue = int64_t(64) << 20) {
    DiskStoreOptions o;
    o.dir = dir_.string();
    o.budget_bytes = budget;
    o.queue_bytes = queue;
    auto s = DiskStore::open(o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return std::move(*s);
  }
  static StoreKey key(uint64_t i) { return store_key(Fingerprint{1, 2}, i, ObjectKind::kBlock); }
  fs::path dir_;
};

TEST_F(DiskStoreTest, PutGetAndReopen) {
  {
    auto s = open(1 << 20);
    EXPECT_FALSE(s->contains(key(1)));
    EXPECT_EQ(s->get(key(1), kDefaultRetention).status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(s->put(key(1), "first", kDefaultRetention));
    EXPECT_TRUE(s->contains(key(1)));  // queued counts
    EXPECT_TRUE(s->put(key(2), std::string(1000, 'x'), kDefaultRetention));
    s->flush();
    auto g = s->get(key(1), kDefaultRetention);
    ASSERT_TRUE(g.is_ok());
    EXPECT_EQ(*g, "first");
    const StoreStats st = s->stats();
    EXPECT_EQ(st.writes, 2);
    EXPECT_EQ(st.objects, 2);
    EXPECT_EQ(st.bytes, 1005);
    EXPECT_EQ(st.bytes_written, 1005);
    EXPECT_EQ(st.hits, 1);
    EXPECT_EQ(st.misses, 1);
    EXPECT_TRUE(fs::exists(s->path_of(key(2))));
  }
  auto s = open(1 << 20);
  EXPECT_EQ(s->stats().objects, 2);
  auto g = s->get(key(2), kDefaultRetention);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(*g, std::string(1000, 'x'));
}

TEST_F(DiskStoreTest, DestructorFinishesQueuedWrites) {
  {
    auto s = open(1 << 24);
    for (uint64_t i = 0; i < 50; ++i)
      s->put(key(i), std::string(10000, char('a' + i % 26)), kDefaultRetention);
  }
  auto s = open(1 << 24);
  EXPECT_EQ(s->stats().objects, 50);
  EXPECT_EQ(*s->get(key(49), kDefaultRetention), std::string(10000, char('a' + 49 % 26)));
}

TEST_F(DiskStoreTest, BudgetEvictsLeastRecentlyUsed) {
  auto s = open(3000);
  s->put(key(1), std::string(1000, '1'), kDefaultRetention);
  s->put(key(2), std::string(1000, '2'), kDefaultRetention);
  s->put(key(3), std::string(1000, '3'), kDefaultRetention);
  s->flush();
  ASSERT_TRUE(s->get(key(1), kDefaultRetention).is_ok());  // 2 is now the least recently used
  s->put(key(4), std::string(1000, '4'), kDefaultRetention);
  s->flush();
  EXPECT_TRUE(s->contains(key(1)));
  EXPECT_FALSE(s->contains(key(2)));
  EXPECT_TRUE(s->contains(key(3)));
  EXPECT_TRUE(s->contains(key(4)));
  EXPECT_FALSE(fs::exists(s->path_of(key(2))));
  EXPECT_EQ(s->stats().evictions, 1);
  EXPECT_LE(s->stats().bytes, 3000);
}

TEST_F(DiskStoreTest, ReopenWithASmallerBudgetEvicts) {
  {
    auto s = open(1 << 20);
    for (uint64_t i = 0; i < 10; ++i) s->put(key(i), std::string(1000, 'x'), kDefaultRetention);
  }
  auto s = open(4500);
  EXPECT_EQ(s->stats().objects, 4);
  EXPECT_LE(s->stats().bytes, 4500);
}

TEST_F(DiskStoreTest, FullQueueDropsTheWrite) {
  auto s = open(1 << 24, 1500);
  EXPECT_FALSE(s->put(key(1), std::string(2000, 'x'), kDefaultRetention));  // never fits the queue
  EXPECT_EQ(s->stats().dropped_writes, 1);
  EXPECT_FALSE(s->contains(key(1)));
}

TEST_F(DiskStoreTest, LeftoversAndStrangersAreIgnored) {
  {
    auto s = open(1 << 20);
    s->put(key(1), "one", kDefaultRetention);
  }
  std::ofstream(dir_ / "tmp" / "half-written.tmp") << "partial";
  std::ofstream(dir_ / "README") << "not an object";
  fs::create_directories(dir_ / "zz");
  std::ofstream(dir_ / "zz" / "nothex.fkv") << "no";
  auto s = open(1 << 20);
  EXPECT_EQ(s->stats().objects, 1);
  EXPECT_FALSE(fs::exists(dir_ / "tmp" / "half-written.tmp"));
}

TEST_F(DiskStoreTest, DamagedFilesAreReturnedAsTheyAreAndCanBeErased) {
  auto s = open(1 << 20);
  s->put(key(1), "0123456789", kDefaultRetention);
  s->flush();
  fs::resize_file(s->path_of(key(1)), 4);
  auto g = s->get(key(1), kDefaultRetention);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(*g, "0123");  // the reader's checks reject it
  s->erase(key(1));
  EXPECT_FALSE(s->contains(key(1)));
  EXPECT_FALSE(fs::exists(s->path_of(key(1))));
  EXPECT_EQ(s->stats().erased, 1);
  // A file deleted behind the store's back is a miss, and leaves the index.
  s->put(key(2), "two", kDefaultRetention);
  s->flush();
  fs::remove(s->path_of(key(2)));
  EXPECT_EQ(s->get(key(2), kDefaultRetention).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(s->contains(key(2)));
}

// A file at an object's path that is not a regular file, or is longer than any object, is a
// miss (kCorrupt) that removes it, without reading it: a FIFO there hung the engine's open()
// for good, and a 6 GiB file was read whole. Longer files found at open() are not indexed.
TEST_F(DiskStoreTest, NoFileCostsMoreThanAnObject) {
  DiskStoreOptions o;
  o.dir = dir_.string();
  o.max_object_bytes = 1000;
  auto opened = DiskStore::open(o);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  auto& s = *opened;
  for (uint64_t i : {1, 2}) s->put(key(i), "an object", kDefaultRetention);
  s->flush();
  const std::string fifo = s->path_of(key(1)), huge = s->path_of(key(2));
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::resize_file(huge, int64_t(6) << 30);  // sparse
  for (uint64_t i : {1, 2}) {
    auto r = s->get(key(i), kDefaultRetention);
    ASSERT_FALSE(r.is_ok()) << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().to_string();
    EXPECT_FALSE(s->contains(key(i)));
  }
  EXPECT_FALSE(fs::exists(fifo));
  EXPECT_FALSE(fs::exists(huge));
  s->put(key(3), "an object", kDefaultRetention);
  s->flush();
  const std::string later = s->path_of(key(3));
  s.reset();
  fs::resize_file(later, 1001);
  auto again = DiskStore::open(o);
  ASSERT_TRUE(again.is_ok());
  EXPECT_FALSE((*again)->contains(key(3)));
  EXPECT_EQ((*again)->stats().objects, 0);
  // Left alone (another model's objects may be larger), and replaced by a write of the key.
  EXPECT_EQ(int64_t(fs::file_size(later)), 1001);
  (*again)->put(key(3), "an object", kDefaultRetention);
  (*again)->flush();
  EXPECT_EQ(int64_t(fs::file_size(later)), 9);
}

// The directory removed while the server runs: writes make it again and go on.
TEST_F(DiskStoreTest, WritesRecreateARemovedDirectory) {
  auto s = open(1 << 20);
  s->put(key(1), "one", kDefaultRetention);
  s->flush();
  fs::remove_all(dir_);
  s->put(key(2), "two", kDefaultRetention);
  s->flush();
  auto r = s->get(key(2), kDefaultRetention);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, "two");
  EXPECT_EQ(s->stats().write_errors, 0);
}

TEST_F(DiskStoreTest, AnUnwritableDirectoryFailsToOpen) {
  DiskStoreOptions o;
  o.dir = "/proc/fathom-no-such-dir";
  EXPECT_FALSE(DiskStore::open(o).is_ok());
}

}  // namespace
}  // namespace fathom::kv
