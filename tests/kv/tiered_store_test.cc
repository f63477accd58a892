// TieredStore over two real disk tiers: get_many() answers each key from the fastest tier that
// holds it, in the order asked, copies what only the slower tier had into the faster one, and
// gives get()'s answer for every key (misses included); a tier's damaged copy is removed
// there alone and the next tier's is read.
#include "kv/tiered_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kv/block_format.h"
#include "kv/disk_store.h"

namespace fathom::kv {
namespace {

namespace fs = std::filesystem;

// A fast and a slow disk tier in a directory of the test's own; tiered() stacks them.
class TieredStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fathom_tiered_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fast_ = open_tier("fast");
    slow_ = open_tier("slow");
    f = fast_.get();
    sl = slow_.get();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<DiskStore> open_tier(const char* sub) {
    DiskStoreOptions o;
    o.dir = (dir_ / sub).string();
    auto s = DiskStore::open(o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return s.is_ok() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<TieredStore> tiered() {
    std::vector<std::unique_ptr<Store>> tiers;
    tiers.push_back(std::move(fast_));
    tiers.push_back(std::move(slow_));
    return std::make_unique<TieredStore>(std::move(tiers));
  }
  static StoreKey key(uint64_t i) { return store_key(Fingerprint{3, 4}, i, ObjectKind::kBlock); }
  fs::path dir_;
  std::unique_ptr<DiskStore> fast_, slow_;
  DiskStore* f = nullptr;  // the tiers, also once tiered() owns them
  DiskStore* sl = nullptr;
};

// A valid object (its envelope passes check_envelope) whose one section holds `text`.
std::string object(const std::string& text) {
  ObjectWriter w;
  w.add(1, 1, text.data(), text.size());
  ObjectHeader h;
  h.block_tokens = 128;
  h.index = 1;
  return w.finish(h);
}

TEST_F(TieredStoreTest, GetManyReadsFastestFirstAndCopiesUp) {
  f->put(key(1), object("one-fast"), kDefaultRetention);
  sl->put(key(1), object("one-slow"), kDefaultRetention);
  sl->put(key(2), object("two-slow"), kDefaultRetention);
  f->put(key(4), object("four-fast"), kDefaultRetention);
  f->flush();
  sl->flush();
  std::unique_ptr<TieredStore> owner = tiered();
  TieredStore& t = *owner;
  const std::vector<StoreKey> keys = {key(2), key(3), key(1), key(4)};
  std::vector<Result<std::string>> got = t.get_many(keys, kDefaultRetention);
  ASSERT_EQ(got.size(), 4u);
  ASSERT_TRUE(got[0].is_ok());
  EXPECT_EQ(*got[0], object("two-slow"));
  EXPECT_EQ(got[1].status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(got[2].is_ok());
  EXPECT_EQ(*got[2], object("one-fast"));  // the fast tier's copy, not the slow one's
  ASSERT_TRUE(got[3].is_ok());
  EXPECT_EQ(*got[3], object("four-fast"));
  // The same answers as get(), key by key.
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<std::string> one = t.get(keys[i], kDefaultRetention);
    EXPECT_EQ(one.is_ok(), got[i].is_ok()) << i;
    if (one.is_ok()) {
      EXPECT_EQ(*one, *got[i]) << i;
    }
  }
  // What only the slow tier had is now on the fast one.
  f->flush();
  auto up = f->get(key(2), kDefaultRetention);
  ASSERT_TRUE(up.is_ok());
  EXPECT_EQ(*up, object("two-slow"));
  EXPECT_TRUE(t.get_many({}, kDefaultRetention).empty());
}

// A tier that counts what it is asked: contains() calls, and the keys of each contains_many().
class CountingTier final : public Store {
 public:
  explicit CountingTier(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}
  bool contains(const StoreKey& key) override {
    ++contains_calls;
    return inner_->contains(key);
  }
  std::vector<bool> contains_many(std::span<const StoreKey> keys) override {
    batches.push_back(keys.size());
    return inner_->contains_many(keys);
  }
  Result<std::string> get(const StoreKey& key, RetentionClass cls) override {
    return inner_->get(key, cls);
  }
  std::vector<Result<std::string>> get_many(std::span<const StoreKey> keys,
                                            RetentionClass cls) override {
    return inner_->get_many(keys, cls);
  }
  bool put(const StoreKey& key, std::string value, RetentionClass cls) override {
    return inner_->put(key, std::move(value), cls);
  }
  void erase(const StoreKey& key) override { inner_->erase(key); }
  void flush() override { inner_->flush(); }
  StoreStats stats() const override { return inner_->stats(); }
  const char* tier_name() const override { return "counting"; }
  int contains_calls = 0;
  std::vector<size_t> batches;

 private:
  std::unique_ptr<Store> inner_;
};

// contains_many() says what contains() says, key by key (held by either tier or by neither),
// in one batch to each tier: the slower one asked only for what the faster lacks. get() reads
// without asking either tier whether it holds the object (a round trip of its own on Redis).
TEST_F(TieredStoreTest, ContainsManyAsksEachTierOnceAndGetAsksNone) {
  f->put(key(1), object("one"), kDefaultRetention);
  sl->put(key(2), object("two"), kDefaultRetention);
  f->put(key(4), object("four"), kDefaultRetention);
  sl->put(key(4), object("four"), kDefaultRetention);
  f->flush();
  sl->flush();
  auto fast = std::make_unique<CountingTier>(std::move(fast_));
  auto slow = std::make_unique<CountingTier>(std::move(slow_));
  CountingTier* cf = fast.get();
  CountingTier* cs = slow.get();
  std::vector<std::unique_ptr<Store>> tiers;
  tiers.push_back(std::move(fast));
  tiers.push_back(std::move(slow));
  TieredStore t(std::move(tiers));
  const std::vector<StoreKey> keys = {key(3), key(2), key(1), key(4), key(5)};
  EXPECT_EQ(t.contains_many(keys), (std::vector<bool>{false, true, true, true, false}));
  EXPECT_EQ(cf->batches, std::vector<size_t>{5});
  EXPECT_EQ(cs->batches, std::vector<size_t>{3});  // keys 3, 2 and 5
  EXPECT_EQ(cf->contains_calls + cs->contains_calls, 0);
  for (const StoreKey& k : keys) EXPECT_EQ(t.contains(k), f->contains(k) || sl->contains(k));
  cf->contains_calls = cs->contains_calls = 0;
  auto two = t.get(key(2), kDefaultRetention);
  ASSERT_TRUE(two.is_ok());
  EXPECT_EQ(*two, object("two"));
  EXPECT_EQ(t.get(key(5), kDefaultRetention).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cf->contains_calls + cs->contains_calls, 0);
  EXPECT_TRUE(t.contains_many({}).empty());
}

// A copy that fails its checks in the fast tier (a flipped byte, a truncation) is erased
// there, the slow tier's good copy is read and copied up, and the slow tier keeps it: one
// damaged disk file used to cost every tier its copy.
TEST_F(TieredStoreTest, ADamagedCopyCostsOnlyItsOwnTier) {
  for (uint64_t i : {1, 2}) {
    f->put(key(i), object("good " + std::to_string(i)), kDefaultRetention);
    sl->put(key(i), object("good " + std::to_string(i)), kDefaultRetention);
  }
  f->flush();
  sl->flush();
  {
    std::fstream flip(f->path_of(key(1)), std::ios::in | std::ios::out | std::ios::binary);
    flip.seekp(-1, std::ios::end);
    flip.put('X');
  }
  fs::resize_file(f->path_of(key(2)), 40);
  std::unique_ptr<TieredStore> owner = tiered();
  TieredStore& t = *owner;
  auto one = t.get(key(1), kDefaultRetention);
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  EXPECT_EQ(*one, object("good 1"));
  auto many = t.get_many(std::vector<StoreKey>{key(2)}, kDefaultRetention);
  ASSERT_TRUE(many[0].is_ok()) << many[0].status().to_string();
  EXPECT_EQ(*many[0], object("good 2"));
  EXPECT_EQ(f->stats().erased, 2);
  EXPECT_EQ(sl->stats().erased, 0);
  for (uint64_t i : {1, 2}) EXPECT_TRUE(sl->contains(key(i)));
  // The good copies went back up.
  f->flush();
  for (uint64_t i : {1, 2}) {
    auto up = f->get(key(i), kDefaultRetention);
    ASSERT_TRUE(up.is_ok()) << i;
    EXPECT_EQ(*up, object("good " + std::to_string(i)));
  }
  // Damaged in the only tier that has it: the caller hears kCorrupt (a miss it counts).
  sl->put(key(3), object("three"), kDefaultRetention);
  sl->flush();
  fs::resize_file(sl->path_of(key(3)), 40);
  EXPECT_EQ(t.get(key(3), kDefaultRetention).status().code(), StatusCode::kCorrupt);
  EXPECT_FALSE(t.contains(key(3)));
}

}  // namespace
}  // namespace fathom::kv
