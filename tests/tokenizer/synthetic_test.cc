// Tokenizer features DeepSeek's file does not use, against Hugging Face `tokenizers` ids
// recorded in tests/data/tokenizer/synthetic_cases.json (see make_synthetic.js there).
#include <gtest/gtest.h>

#include "tokenizer/test_util.h"

namespace fathom::test {
namespace {

class Synthetic : public ::testing::TestWithParam<size_t> {
 public:
  static const nlohmann::json& data() {
    static auto* d = new nlohmann::json(read_json(data_path("tokenizer/synthetic_cases.json")));
    return *d;
  }
};

TEST_P(Synthetic, MatchesHf) {
  const auto& c = data()["cases"][GetParam()];
  nlohmann::json json = data()["base"];
  for (const auto& [k, v] : c["patch"].items()) json[k] = v;
  auto tok = Tokenizer::load_json(json.dump());
  ASSERT_TRUE(tok.is_ok()) << c["name"] << ": " << tok.status().to_string();
  for (const auto& row : c["rows"]) {
    std::string text = row["text"].get<std::string>();
    auto ids = (*tok)->encode(text);
    ASSERT_TRUE(ids.is_ok());
    EXPECT_EQ(*ids, row["ids"].get<std::vector<int32_t>>()) << c["name"] << " text=" << text;
    auto with = (*tok)->encode(text, {.add_special_tokens = true});
    EXPECT_EQ(*with, row["ids_with_special"].get<std::vector<int32_t>>())
        << c["name"] << " text=" << text;
    EXPECT_EQ(*(*tok)->decode(*ids), row["decoded"].get<std::string>())
        << c["name"] << " text=" << text;
    EXPECT_EQ(*(*tok)->decode(*ids, true), row["decoded_skip"].get<std::string>())
        << c["name"] << " text=" << text;
  }
}

std::string variant_name(const ::testing::TestParamInfo<size_t>& info) {
  return Synthetic::data()["cases"][info.param]["name"].get<std::string>();
}

INSTANTIATE_TEST_SUITE_P(Variants, Synthetic,
                         ::testing::Range<size_t>(0, Synthetic::data()["cases"].size()),
                         variant_name);

}  // namespace
}  // namespace fathom::test
