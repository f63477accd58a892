// TieredStore over two real disk tiers: get_many() answers each key from the fastest tier that
// holds it, in the order asked, copies what only the slower tier had into the faster one, and
// gives get()'s answer for every key (misses included).
#include "kv/tiered_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "kv/disk_store.h"

namespace fathom::kv {
namespace {

namespace fs = std::filesystem;

TEST(TieredStore, GetManyReadsFastestFirstAndCopiesUp) {
  const fs::path dir = fs::temp_directory_path() / ("fathom_tiered_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto open = [&](const char* sub) {
    DiskStoreOptions o;
    o.dir = (dir / sub).string();
    auto s = DiskStore::open(o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return std::move(*s);
  };
  std::unique_ptr<DiskStore> fast = open("fast"), slow = open("slow");
  DiskStore* f = fast.get();
  DiskStore* sl = slow.get();
  auto key = [](uint64_t i) { return store_key(Fingerprint{3, 4}, i, ObjectKind::kBlock); };
  f->put(key(1), "one-fast", kDefaultRetention);
  sl->put(key(1), "one-slow", kDefaultRetention);
  sl->put(key(2), "two-slow", kDefaultRetention);
  f->put(key(4), "four-fast", kDefaultRetention);
  f->flush();
  sl->flush();
  std::vector<std::unique_ptr<Store>> tiers;
  tiers.push_back(std::move(fast));
  tiers.push_back(std::move(slow));
  TieredStore t(std::move(tiers));
  const std::vector<StoreKey> keys = {key(2), key(3), key(1), key(4)};
  std::vector<Result<std::string>> got = t.get_many(keys, kDefaultRetention);
  ASSERT_EQ(got.size(), 4u);
  ASSERT_TRUE(got[0].is_ok());
  EXPECT_EQ(*got[0], "two-slow");
  EXPECT_EQ(got[1].status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(got[2].is_ok());
  EXPECT_EQ(*got[2], "one-fast");  // the fast tier's copy, not the slow one's
  ASSERT_TRUE(got[3].is_ok());
  EXPECT_EQ(*got[3], "four-fast");
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
  EXPECT_EQ(*up, "two-slow");
  EXPECT_TRUE(t.get_many({}, kDefaultRetention).empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fathom::kv
