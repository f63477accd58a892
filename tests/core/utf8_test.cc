#include "core/utf8.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace fathom {
namespace {

std::string from_hex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

TEST(Utf8, ValidatesAgainstTheUnicodeTable) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("plain ascii"));
  EXPECT_TRUE(utf8::is_valid("中文 😀 é \xf4\x8f\xbf\xbf"));
  EXPECT_FALSE(utf8::is_valid("\xc0\x80"));          // overlong NUL
  EXPECT_FALSE(utf8::is_valid("\xe0\x80\x80"));      // overlong
  EXPECT_FALSE(utf8::is_valid("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8::is_valid("abc\xe4\xb8"));       // truncated
  EXPECT_EQ(utf8::find_invalid("abcdefghij\xff"), 10u);
  Status s = utf8::validate("ab\x80", "field");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("field"), std::string::npos);
  EXPECT_NE(s.message().find("offset 2"), std::string::npos);
}

TEST(Utf8, LossyMatchesTheStandardExample) {
  // Unicode 15 §3.9, Table 3-8: U+FFFD for each maximal subpart.
  std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(utf8::to_lossy(in), "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
}

TEST(Utf8, LossyAndValidityMatchCPython) {
  std::ifstream in(std::string(FATHOM_TEST_DATA) + "/core/utf8_cases.json");
  ASSERT_TRUE(in.good());
  auto data = nlohmann::json::parse(in);
  ASSERT_EQ(data["cases"].size(), 3000u);
  for (const auto& c : data["cases"]) {
    std::string bytes = from_hex(c["hex"].get<std::string>());
    EXPECT_EQ(utf8::to_lossy(bytes), c["lossy"].get<std::string>()) << c["hex"];
    EXPECT_EQ(utf8::is_valid(bytes), c["valid"].get<bool>()) << c["hex"];
    // Streaming in pieces of any size gives the same text.
    for (size_t step : {1, 2, 3}) {
      std::string out, pending;
      for (size_t i = 0; i < bytes.size(); i += step) {
        pending += bytes.substr(i, step);
        size_t keep = utf8::append_lossy(out, pending, false);
        pending.erase(0, pending.size() - keep);
        ASSERT_LE(keep, 3u);
      }
      utf8::append_lossy(out, pending, true);
      EXPECT_EQ(out, c["lossy"].get<std::string>()) << c["hex"] << " step " << step;
    }
  }
}

TEST(Utf8, EncodeDecodeRoundTrip) {
  for (uint32_t cp : {0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    utf8::append(s, cp);
    ASSERT_TRUE(utf8::is_valid(s));
    size_t len = 0;
    EXPECT_EQ(utf8::decode_at(s, 0, &len), cp);
    EXPECT_EQ(len, s.size());
  }
}

}  // namespace
}  // namespace fathom
