// The DeepSeek tokenizer against Hugging Face `tokenizers` on the golden corpus
// (tests/data/tokenizer, copied from shared/golden/tokenizer).
#include <gtest/gtest.h>

#include <map>

#include "core/utf8.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/test_util.h"

namespace fathom::test {
namespace {

const std::vector<nlohmann::json>& corpus() {
  static auto* c =
      new std::vector<nlohmann::json>(read_jsonl(data_path("tokenizer/corpus_dev.jsonl")));
  return *c;
}
const std::vector<nlohmann::json>& decode_cases() {
  static auto* c =
      new std::vector<nlohmann::json>(read_jsonl(data_path("tokenizer/decode_dev.jsonl")));
  return *c;
}

TEST(GoldenTokenizer, CorpusHasAllCases) {
  EXPECT_EQ(corpus().size(), 2130u);
  EXPECT_EQ(decode_cases().size(), 200u);
}

TEST(GoldenTokenizer, EncodeMatchesHfWithAddedTokens) {
  const Tokenizer& tok = deepseek();
  ASSERT_TRUE(tok.uses_fast_pre_tokenizer());
  size_t bad = 0;
  for (const auto& c : corpus()) {
    auto ids = tok.encode(c["text"].get<std::string>());
    ASSERT_TRUE(ids.is_ok()) << c["id"];
    if (*ids != c["ids"].get<std::vector<int32_t>>()) {
      ADD_FAILURE() << "ids differ for " << c["id"];
      if (++bad > 10) break;
    }
  }
}

TEST(GoldenTokenizer, EncodePlainMatchesHfWithoutAddedTokens) {
  const Tokenizer& tok = deepseek();
  size_t bad = 0;
  for (const auto& c : corpus()) {
    auto ids = tok.encode_plain(c["text"].get<std::string>());
    ASSERT_TRUE(ids.is_ok()) << c["id"];
    if (*ids != c["ids_plain"].get<std::vector<int32_t>>()) {
      ADD_FAILURE() << "ids_plain differ for " << c["id"];
      if (++bad > 10) break;
    }
  }
}

// spelling() is the file's own spelling of every id (HF's id_to_token): an added token's
// content, else the vocabulary entry; nothing for an id the file does not have.
TEST(GoldenTokenizer, SpellingIsTheFilesEntryForEveryId) {
  const Tokenizer& tok = deepseek();
  const nlohmann::json file = nlohmann::json::parse(deepseek_json());
  std::map<int64_t, std::string> want;
  for (const auto& [text, id] : file["model"]["vocab"].items()) want[id.get<int64_t>()] = text;
  for (const auto& a : file["added_tokens"]) want[a["id"].get<int64_t>()] = a["content"];
  ASSERT_GT(want.size(), 128000u);
  size_t bad = 0;
  for (const auto& [id, text] : want) {
    if (tok.spelling(int32_t(id)) != text && ++bad <= 5)
      ADD_FAILURE() << id << ": " << tok.spelling(int32_t(id)) << " != " << text;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(tok.spelling(-1), "");
  EXPECT_EQ(tok.spelling(int32_t(tok.vocab_size()) + 5), "");
}

TEST(GoldenTokenizer, EncodePlainIntoAppends) {
  const Tokenizer& tok = deepseek();
  std::vector<int32_t> out = {7};
  ASSERT_TRUE(tok.encode_plain_into("<｜User｜>hi", out).is_ok());
  std::vector<int32_t> want = {7, 30, 28217, 6756, 28217, 32};
  auto hi = tok.encode_plain("hi");
  want.insert(want.end(), hi->begin(), hi->end());
  EXPECT_EQ(out, want);
}

TEST(GoldenTokenizer, PlainNeverYieldsAnAddedToken) {
  const Tokenizer& tok = deepseek();
  for (const auto& c : corpus()) {
    auto ids = tok.encode_plain(c["text"].get<std::string>());
    for (int32_t id : *ids) ASSERT_FALSE(tok.is_added(id)) << c["id"] << " gave added id " << id;
  }
  // Every added token's spelling, alone and glued together, stays plain text.
  std::string all;
  for (const auto& t : tok.added_tokens()) all += t.content;
  auto ids = tok.encode_plain(all);
  ASSERT_TRUE(ids.is_ok());
  for (int32_t id : *ids) EXPECT_FALSE(tok.is_added(id));
}

TEST(GoldenTokenizer, DecodeMatchesHf) {
  const Tokenizer& tok = deepseek();
  for (const auto& c : decode_cases()) {
    auto ids = c["ids"].get<std::vector<int32_t>>();
    auto text = tok.decode(ids, false);
    ASSERT_TRUE(text.is_ok()) << c["id"];
    EXPECT_EQ(*text, c["text"].get<std::string>()) << c["id"];
    auto skipped = tok.decode(ids, true);
    ASSERT_TRUE(skipped.is_ok()) << c["id"];
    EXPECT_EQ(*skipped, c["text_skip_special"].get<std::string>()) << c["id"];
  }
}

TEST(GoldenTokenizer, StreamDecoderEqualsDecodeAndNeverSplitsACharacter) {
  const Tokenizer& tok = deepseek();
  for (bool skip : {false, true}) {
    for (const auto& c : decode_cases()) {
      auto ids = c["ids"].get<std::vector<int32_t>>();
      StreamDecoder dec(tok, skip);
      std::string all;
      for (int32_t id : ids) {
        std::string delta;
        ASSERT_TRUE(dec.push(id, delta).is_ok());
        ASSERT_TRUE(utf8::is_valid(delta)) << c["id"];
        all += delta;
      }
      std::string tail;
      dec.finish(tail);
      ASSERT_TRUE(utf8::is_valid(tail));
      all += tail;
      EXPECT_EQ(all, c[skip ? "text_skip_special" : "text"].get<std::string>()) << c["id"];
    }
  }
}

TEST(GoldenTokenizer, DecodeOfEncodeIsTheText) {
  const Tokenizer& tok = deepseek();
  for (const auto& c : corpus()) {
    std::string text = c["text"].get<std::string>();
    auto back = tok.decode(c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(*back, text) << c["id"];
  }
}

TEST(GoldenTokenizer, SpecialTokensByName) {
  const Tokenizer& tok = deepseek();
  EXPECT_EQ(tok.id_of("<｜User｜>"), 128803);
  EXPECT_EQ(tok.id_of("<｜Assistant｜>"), 128804);
  EXPECT_EQ(tok.id_of("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(tok.id_of("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(tok.id_of("<|User|>"), -1);
  EXPECT_EQ(tok.id_of("<think>"), -1);  // not an added token in the V3 file
  // Vocabulary entries by their tokenizer.json spelling.
  EXPECT_EQ(tok.id_of("Ġthe"), tok.encode_plain(" the")->at(0));
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(128803));  // special: false in the file
  EXPECT_TRUE(tok.is_added(128803));
  EXPECT_EQ(tok.vocab_size(), 128815u);
  EXPECT_EQ(tok.token_bytes(1), "<｜end▁of▁sentence｜>");
}

TEST(GoldenTokenizer, InvalidUtf8IsAnError) {
  const Tokenizer& tok = deepseek();
  for (std::string bad :
       {std::string("\xff"), std::string("ab\xc3"), std::string("\xed\xa0\x80"),
        std::string("\xc0\xaf"), std::string("x\xf4\x90\x80\x80"), std::string("ok\x80ok")}) {
    auto r = tok.encode(bad);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("UTF-8"), std::string::npos);
    EXPECT_FALSE(tok.encode_plain(bad).is_ok());
    std::vector<int32_t> out;
    EXPECT_FALSE(tok.encode_plain_into(bad, out).is_ok());
  }
}

TEST(GoldenTokenizer, UnknownIdsAreAnError) {
  const Tokenizer& tok = deepseek();
  for (int32_t id : {-1, 128815, 1 << 30}) {
    std::vector<int32_t> ids = {5, id};
    auto r = tok.decode(ids);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
    StreamDecoder d(tok);
    std::string out;
    EXPECT_FALSE(d.push(id, out).is_ok());
  }
}

}  // namespace
}  // namespace fathom::test
