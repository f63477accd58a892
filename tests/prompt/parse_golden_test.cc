// The reference completion parser against DeepSeek's official parser
// (tests/data/encoding/*/parse_*.jsonl): the parsed message, or rejection.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/py_json.h"
#include "prompt/reference.h"

namespace fathom::prompt {
namespace {

struct ParseFile {
  const char* path;
  bool v41;
  size_t expected_cases;
};

class ParseGolden : public ::testing::TestWithParam<ParseFile> {};

TEST_P(ParseGolden, MatchesOfficialParser) {
  const ParseFile& g = GetParam();
  std::ifstream in(std::string(FATHOM_TEST_DATA) + "/encoding/" + g.path);
  ASSERT_TRUE(in.good());
  std::string line;
  size_t n = 0, rejected = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n;
    auto c = pyjson::parse(line);
    ASSERT_TRUE(c.is_ok());
    std::string id = c->find("id")->text;
    bool thinking = c->find("thinking_mode")->text == "thinking";
    auto msg = parse_completion_reference(c->find("completion")->text, thinking, g.v41);
    if (c->find("error") != nullptr) {
      ++rejected;
      EXPECT_FALSE(msg.is_ok()) << id << " was rejected by the official parser: "
                                << c->find("error")->text;
      continue;
    }
    ASSERT_TRUE(msg.is_ok()) << id << ": " << msg.status().to_string();
    EXPECT_EQ(pyjson::dumps(*msg, false), pyjson::dumps(*c->find("parsed"), false)) << id;
  }
  EXPECT_EQ(n, g.expected_cases);
  if (n >= 60) {
    EXPECT_GT(rejected, 10u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Files, ParseGolden,
    ::testing::Values(ParseFile{"v4/parse_dev.jsonl", false, 60},
                      ParseFile{"v4/official/official_parse.jsonl", false, 3},
                      ParseFile{"v41/parse_dev.jsonl", true, 60},
                      ParseFile{"v41/official_inline/parse_official_inline.jsonl", true, 2}),
    [](const ::testing::TestParamInfo<ParseFile>& p) {
      std::string s = p.param.path;
      for (char& ch : s)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return s;
    });

TEST(ParseReference, StringFalseValuesArePastedRaw) {
  // The official quirk: a string="false" value that is not JSON lands in `arguments` as is.
  std::string completion =
      "</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter "
      "name=\"bad\" "
      "string=\"false\">not json</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ "
      "calls><｜end▁of▁sentence｜>";
  auto msg = parse_completion_reference(completion, true, true);
  ASSERT_TRUE(msg.is_ok()) << msg.status().to_string();
  EXPECT_EQ(msg->find("tool_calls")->items[0].find("function")->find("arguments")->text,
            "{\"bad\": not json}");
  // V4 tags are not V4.1's.
  EXPECT_FALSE(
      parse_completion_reference("a\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>", false, true)
          .is_ok());
}

}  // namespace
}  // namespace fathom::prompt
