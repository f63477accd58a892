// core/py_json against CPython's json module (tests/data/core/pyjson_cases.json).
#include "core/py_json.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace fathom::pyjson {
namespace {

nlohmann::json cases() {
  std::ifstream in(std::string(FATHOM_TEST_DATA) + "/core/pyjson_cases.json");
  return nlohmann::json::parse(in);
}

TEST(PyJson, RoundTripsLikeCPython) {
  auto data = cases();
  ASSERT_GT(data["cases"].size(), 60u);
  for (const auto& c : data["cases"]) {
    std::string text = c["text"].get<std::string>();
    auto v = parse(text);
    if (c.contains("error")) {
      EXPECT_FALSE(v.is_ok()) << "accepted: " << text;
      continue;
    }
    ASSERT_TRUE(v.is_ok()) << text << ": " << v.status().to_string();
    EXPECT_EQ(dumps(*v, false), c["dumps"].get<std::string>()) << text;
    EXPECT_EQ(dumps(*v, true), c["dumps_ascii"].get<std::string>()) << text;
  }
}

TEST(PyJson, FloatReprMatchesCPython) {
  auto data = cases();
  ASSERT_GT(data["floats"].size(), 2900u);
  for (const auto& f : data["floats"]) {
    uint64_t bits = f["bits"].get<uint64_t>();
    double d;
    std::memcpy(&d, &bits, 8);
    EXPECT_EQ(float_repr(d), f["repr"].get<std::string>()) << bits;
  }
}

TEST(PyJson, ObjectsKeepOrderAndDepthIsLimited) {
  auto v = parse(R"({"b": 1, "a": 2, "b": 3})");
  ASSERT_TRUE(v.is_ok());
  ASSERT_EQ(v->keys.size(), 2u);
  EXPECT_EQ(v->keys[0], "b");
  EXPECT_EQ(v->find("b")->text, "3");
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_FALSE(parse(deep).is_ok());
  EXPECT_TRUE(parse(deep, {.max_depth = 300}).is_ok());
  EXPECT_FALSE(parse("\"\xff\"").is_ok());
  int64_t i = 0;
  EXPECT_TRUE(parse("-42")->int_fits_int64(&i));
  EXPECT_EQ(i, -42);
  EXPECT_FALSE(parse("123456789012345678901234")->int_fits_int64(&i));
}

}  // namespace
}  // namespace fathom::pyjson
