#include "core/json_write.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace fathom {
namespace {

TEST(JsonWrite, StringsRoundTripThroughAJsonParser) {
  for (std::string s : {std::string(""), std::string("plain"), std::string("q\"b\\s/"),
                        std::string("\n\r\t\b\f"), std::string("\x00\x01\x1f\x7f", 4),
                        std::string("中文😀"), std::string("\u2028\u2029\u0085")}) {
    std::string out;
    json::append_string(out, s);
    EXPECT_EQ(nlohmann::json::parse(out).get<std::string>(), s) << out;
    EXPECT_EQ(out.find('\n'), std::string::npos);
    EXPECT_EQ(out.find("\u2028"), std::string::npos);
  }
}

TEST(JsonWrite, IntArrays) {
  std::string out;
  std::vector<int32_t> v = {0, -5, 128803, 2147483647};
  json::append_int_array(out, v);
  EXPECT_EQ(out, "[0,-5,128803,2147483647]");
}

}  // namespace
}  // namespace fathom
