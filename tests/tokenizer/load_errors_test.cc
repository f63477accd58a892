// Malformed and unsupported tokenizer.json files give typed errors that name the problem.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/test_util.h"

namespace fathom::test {
namespace {

void expect_error(const std::string& json, StatusCode code, const std::string& mention) {
  auto r = Tokenizer::load_json(json);
  ASSERT_FALSE(r.is_ok()) << "accepted: " << json.substr(0, 200);
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(mention), std::string::npos) << r.status().to_string();
}

TEST(LoadErrors, NotJson) {
  expect_error("", StatusCode::kCorrupt, "not valid JSON");
  expect_error("{", StatusCode::kCorrupt, "not valid JSON");
  expect_error("\xff\xfe", StatusCode::kCorrupt, "not valid JSON");
  expect_error("[]", StatusCode::kCorrupt, "top level");
  expect_error("{}", StatusCode::kCorrupt, "model");
}

TEST(LoadErrors, TruncatedRealFile) {
  std::string full = deepseek_json();
  for (size_t cut : {size_t(10), full.size() / 3, full.size() - 2}) {
    expect_error(full.substr(0, cut), StatusCode::kCorrupt, "not valid JSON");
  }
}

TEST(LoadErrors, UnsupportedModelAndOptions) {
  auto j = minimal_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  expect_error(j.dump(), StatusCode::kUnsupported, "WordPiece");
  j = minimal_tokenizer_json();
  j["model"]["byte_fallback"] = true;
  expect_error(j.dump(), StatusCode::kUnsupported, "byte_fallback");
  j = minimal_tokenizer_json();
  j["model"]["dropout"] = 0.1;
  expect_error(j.dump(), StatusCode::kUnsupported, "dropout");
  j = minimal_tokenizer_json();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_error(j.dump(), StatusCode::kUnsupported, "continuing_subword_prefix");
  j = minimal_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error(j.dump(), StatusCode::kUnsupported, "Metaspace");
  j = minimal_tokenizer_json();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  expect_error(j.dump(), StatusCode::kUnsupported, "ByteLevel");
  j = minimal_tokenizer_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error(j.dump(), StatusCode::kUnsupported, "BertNormalizer");
  j = minimal_tokenizer_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j.dump(), StatusCode::kUnsupported, "WordPiece");
}

TEST(LoadErrors, BadVocabularyAndMerges) {
  auto j = minimal_tokenizer_json();
  j["model"]["vocab"]["x"] = -3;
  expect_error(j.dump(), StatusCode::kCorrupt, "vocab");
  j = minimal_tokenizer_json();
  j["model"]["vocab"]["zz"] = 5;  // id 5 is already a byte token
  expect_error(j.dump(), StatusCode::kCorrupt, "used twice");
  j = minimal_tokenizer_json();
  j["model"]["merges"] = {"a b c"};
  expect_error(j.dump(), StatusCode::kCorrupt, "one space");
  j = minimal_tokenizer_json();
  j["model"]["merges"] = {"a b"};  // "ab" is not in the vocabulary
  expect_error(j.dump(), StatusCode::kCorrupt, "missing from the vocabulary");
  j = minimal_tokenizer_json();
  j["model"]["merges"] = {{"a", 3}};
  expect_error(j.dump(), StatusCode::kCorrupt, "merge");
  j = minimal_tokenizer_json();
  j["model"]["vocab"] = nlohmann::json::array();
  expect_error(j.dump(), StatusCode::kCorrupt, "vocab");
}

TEST(LoadErrors, BadAddedTokensAndPatterns) {
  auto j = minimal_tokenizer_json();
  j["added_tokens"] = {{{"id", "x"}, {"content", "<s>"}}};
  expect_error(j.dump(), StatusCode::kCorrupt, "added token id");
  j = minimal_tokenizer_json();
  j["added_tokens"] = {{{"id", 300}}};
  expect_error(j.dump(), StatusCode::kCorrupt, "content");
  j = minimal_tokenizer_json();
  j["added_tokens"] = {{{"id", 300}, {"content", "<s>"}, {"special", "yes"}}};
  expect_error(j.dump(), StatusCode::kCorrupt, "special");
  j = minimal_tokenizer_json();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}}}}};
  expect_error(j.dump(), StatusCode::kInvalidArgument, "(unclosed");
  j = minimal_tokenizer_json();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}},
        {{"type", "ByteLevel"}}}}};
  expect_error(j.dump(), StatusCode::kCorrupt, "Sideways");
  j = minimal_tokenizer_json();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<bos>"}}}}}},
                         {"special_tokens", nlohmann::json::object()}};
  expect_error(j.dump(), StatusCode::kCorrupt, "<bos>");
}

TEST(LoadErrors, MissingFile) {
  auto r = Tokenizer::load_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(LoadErrors, RandomMutationsNeverCrash) {
  // Byte flips of a small valid file: each load either succeeds or returns an error.
  std::string good = minimal_tokenizer_json({{"a", "b"}, {"ab", "c"}}).dump();
  ASSERT_TRUE(Tokenizer::load_json(good).is_ok());
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string s = good;
    for (int k = 0; k < 3; ++k) s[rng() % s.size()] = static_cast<char>(rng() & 0xFF);
    auto r = Tokenizer::load_json(s);
    if (r.is_ok()) {
      auto ids = (*r)->encode("abc def");
      (void)ids;
    }
  }
}

TEST(LoadErrors, MinimalFileWorks) {
  auto tok = Tokenizer::load_json(minimal_tokenizer_json({{"a", "b"}, {"ab", "c"}}).dump());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  auto ids = (*tok)->encode("abc");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids->size(), 1u);
  EXPECT_EQ(*(*tok)->decode(*ids), "abc");
}

}  // namespace
}  // namespace fathom::test
