#include "core/status.h"

#include <gtest/gtest.h>

namespace fathom {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("not positive: " + std::to_string(v));
  return v;
}

Status twice(int v, int* out) {
  FATHOM_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = 2 * x;
  return Status::ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::ok().is_ok());
  Status s = corrupt("bad header");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.to_string(), "corrupt: bad header");
  EXPECT_EQ(status_code_name(StatusCode::kUnsupported), "unsupported");
  EXPECT_EQ(status_code_name(StatusCode::kCancelled), "cancelled");
}

TEST(Status, ResultAndMacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(twice(4, &out).is_ok());
  EXPECT_EQ(out, 8);
  Status s = twice(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "not positive: -1");
  Result<std::string> r = std::string("x");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, "x");
}

}  // namespace
}  // namespace fathom
