// PagedRows growth and truncation against the pool's own page accounting.
#include <gtest/gtest.h>

#include "kv/page_pool.h"

namespace fathom::kv {
namespace {

TEST(PagedRows, TruncateGivesBackWholePagesAndZeroesTheRestOfTheLastOne) {
  PagePool pool(64, 0);  // pages of 4 rows of 4 floats
  PagedRows t(&pool, 4);
  ASSERT_TRUE(t.grow(10).is_ok());  // 3 pages
  for (int64_t i = 0; i < 10; ++i) t.row(i)[0] = t.row(i)[1] = float(i + 1);
  EXPECT_EQ(pool.stats().pages_in_use, 3);
  t.truncate(5);  // rows 0..4: pages 0 and 1, row 4 in page 1
  EXPECT_EQ(t.size(), 5);
  EXPECT_EQ(pool.stats().pages_in_use, 2);
  EXPECT_EQ(t.row(4)[0], 5.0f);
  ASSERT_TRUE(t.grow(3).is_ok());  // rows 5..7 reuse page 1: zeroed, not the old values
  EXPECT_EQ(pool.stats().pages_in_use, 2);
  for (int64_t i = 5; i < 8; ++i) EXPECT_EQ(t.row(i)[0], 0.0f) << i;
  t.truncate(8);  // no-op
  t.truncate(0);
  EXPECT_EQ(t.size(), 0);
  EXPECT_EQ(pool.stats().pages_in_use, 0);
}

}  // namespace
}  // namespace fathom::kv
