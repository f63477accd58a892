// The Engram compressed-token map built from a tokenizer (spec §6.8 step 1): ids that
// normalise alike share an id, and the hasher refuses a tokenizer whose map does not have the
// config's size. (Every id of the fixture's map is checked against an HF `tokenizers` oracle
// by tests/oracle/engram_map.sh. The fixture — V3's BPE plus the V4/V4.1 control tokens — gives
// 98,906 compressed ids, not the released tokenizer's 99,092, so the released hasher can only
// be built from the real V4.1 tokenizer.json.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "model/config.h"
#include "model/engram.h"
#include "model/v41.h"
#include "tokenizer/tokenizer.h"
#include "v41_fixture_path.h"

namespace fathom::model {
namespace {

TEST(EngramTokenMap, CaseAndSpacingFold) {
  auto tok = Tokenizer::load_file(test::v41_fixture_path());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string() << " (run scripts/setup.sh)";
  int64_t size = 0;
  auto map = build_compressed_token_map(**tok, &size);
  ASSERT_TRUE(map.is_ok()) << map.status().to_string();
  ASSERT_EQ(map->size(), (*tok)->vocab_size());
  EXPECT_GT(size, 90000);
  EXPECT_LT(size, int64_t(map->size()));
  // Case and accents fold: " The", " the" and " THE" are one compressed id.
  auto id = [&](const char* text) {
    auto ids = (*tok)->encode_plain(text);
    EXPECT_TRUE(ids.is_ok() && ids->size() == 1) << text;
    return ids.is_ok() && !ids->empty() ? (*map)[size_t((*ids)[0])] : -1;
  };
  EXPECT_EQ(id(" The"), id(" the"));
  EXPECT_EQ(id("the"), id(" the"));  // a leading space is stripped
  EXPECT_NE(id(" the"), id(" cat"));
  // The first ids keep their own (first-seen) ids.
  EXPECT_EQ((*map)[0], 0);
  EXPECT_EQ((*map)[1], 1);
}

TEST(EngramTokenMap, TheHasherChecksTheMapAgainstTheConfig) {
  auto tok = Tokenizer::load_file(test::v41_fixture_path());
  ASSERT_TRUE(tok.is_ok());
  auto cfg = load_model_config_file(std::string(FATHOM_TEST_DATA) + "/model/v41_flash_config.json");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  auto h = EngramHasher::from_tokenizer(**tok, *cfg);
  ASSERT_FALSE(h.is_ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("99092"), std::string::npos) << h.status().to_string();
  ModelConfig other = *cfg;
  other.engram_compressed_vocab_size = 1000;
  EXPECT_EQ(EngramHasher::from_tokenizer(**tok, other).status().code(), StatusCode::kUnsupported);
}

TEST(EngramTokenMap, ACheckpointWithoutTablesNeedsATokenizer) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(FATHOM_TEST_DATA) / "model" / "v41-tiny";
  const fs::path dir = fs::temp_directory_path() / "fathom_no_engram_tables";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink(src / "config.json", dir / "config.json");
  fs::create_symlink(src / "model.safetensors", dir / "model.safetensors");
  auto m = V41Model::load(dir.string());
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("engram_tables.json"), std::string::npos);
  // The tiny model's Engram (layers 1 and 4, 716 ids) is not the released one.
  ModelOptions o;
  o.tokenizer_path = test::v41_fixture_path();
  m = V41Model::load(dir.string(), o);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnsupported);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fathom::model
