// Config loading, the V4.1 tensor layout and safetensors validation, against the golden tiny
// checkpoint (tests/data/model/v41-tiny, DeepSeek's official layout) and the released
// V4.1-Flash config's published figures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/config.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace fathom::model {
namespace {

std::string data(const std::string& rel) { return std::string(FATHOM_TEST_DATA) + "/model/" + rel; }

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ModelConfig, BothLayoutsOfTheTinyConfigAgree) {
  auto root = load_model_config_file(data("v41-tiny/config.json"));
  auto flat = load_model_config_file(data("v41-tiny/inference/config.json"));
  ASSERT_TRUE(root.is_ok()) << root.status().to_string();
  ASSERT_TRUE(flat.is_ok()) << flat.status().to_string();
  root->vision_n_layers = flat->vision_n_layers;
  EXPECT_TRUE(*root == *flat);
  auto dir = load_model_config_dir(data("v41-tiny"));
  ASSERT_TRUE(dir.is_ok()) << dir.status().to_string();
  EXPECT_EQ(dir->dim, 256);
  EXPECT_EQ(dir->compress_ratios.size(), 13u);
  EXPECT_EQ(dir->kv_source_layers, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(dir->engram_pad_id, 2);
  EXPECT_EQ(dir->original_seq_len, 65536);
  EXPECT_DOUBLE_EQ(dir->norm_eps, 1e-20);
}

TEST(ModelConfig, RejectsBadConfigs) {
  std::string good = read_file(data("v41-tiny/inference/config.json"));
  auto j = nlohmann::ordered_json::parse(good);
  auto expect_bad = [](const nlohmann::ordered_json& x, const std::string& mention) {
    auto r = parse_model_config(x.dump());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find(mention), std::string::npos) << r.status().to_string();
  };
  auto k = j;
  k.erase("dim");
  expect_bad(k, "dim");
  k = j;
  k["compress_ratios"].push_back(0);
  expect_bad(k, "compress_ratios");
  k = j;
  k["kv_source_layers"] = {2, 40};
  expect_bad(k, "kv_source_layers");
  k = j;
  k["n_heads"] = "eight";
  expect_bad(k, "n_heads");
  k = j;
  k["expert_dtype"] = "fp8";
  expect_bad(k, "expert dtype");
  EXPECT_FALSE(parse_model_config("{not json").is_ok());
}

TEST(Layout, MatchesTheGoldenCheckpointExactly) {
  auto cfg = load_model_config_dir(data("v41-tiny"));
  ASSERT_TRUE(cfg.is_ok());
  auto ck = Checkpoint::open(data("v41-tiny"));
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  auto layout = v41_layout(*cfg);
  EXPECT_EQ(layout.size(), 1028u);
  EXPECT_EQ((*ck)->tensors().size(), 1028u);
  Status st = check_checkpoint(**ck, layout);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  const TensorInfo* w1 = (*ck)->find("layers.0.ffn.experts.0.w1.weight");
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->dtype, DType::kI8);
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{128, 128}));
}

TEST(Layout, ReleasedConfigReproducesThePublishedFigures) {
  auto cfg = load_model_config_file(data("v41_flash_config.json"));
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  ModelSizes m = model_sizes(*cfg);
  // 552B backbone and 196B Engram parameters (model card); 890 B/token; 528 B per SWA entry.
  EXPECT_EQ((m.backbone_params + 500'000'000) / 1'000'000'000, 552);
  EXPECT_EQ(m.engram_table_params / 1'000'000'000, 196);
  EXPECT_DOUBLE_EQ(m.global_kv_bytes_per_token, 890.0);
  EXPECT_EQ(m.swa_entry_bytes, 528);
  EXPECT_EQ(m.compressed_entry_bytes, 288);
  EXPECT_EQ(m.indexer_entry_bytes, 68);
  // The header audit of the real shards: routed experts 288.8 GB, one expert 18,800,640 B.
  EXPECT_EQ(m.bytes[int(Part::kRoutedExperts)], 40LL * 384 * 18'800'640);
  EXPECT_EQ(m.bytes[int(Part::kEmbedding)], 1'323'827'200);
}

class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    original_ = read_file(data("v41-tiny/model.safetensors"));
    ASSERT_GT(original_.size(), 1000u);
    std::memcpy(&header_len_, original_.data(), 8);
    header_ = nlohmann::ordered_json::parse(original_.substr(8, header_len_));
    dir_ = ::testing::TempDir() + "fathom_ck_" + std::to_string(getpid());
  }
  std::string write(const std::string& bytes) {
    std::string p = dir_ + ".safetensors";
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // The file with its header replaced (the data section unchanged).
  std::string with_header(const nlohmann::ordered_json& h) {
    std::string js = h.dump();
    uint64_t n = js.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    return out + js + original_.substr(8 + header_len_);
  }
  Status open_error(const std::string& bytes) {
    auto r = SafetensorsFile::open(write(bytes));
    return r.is_ok() ? Status::ok() : r.status();
  }
  std::string original_;
  uint64_t header_len_ = 0;
  nlohmann::ordered_json header_;
  std::string dir_;
};

TEST_F(BrokenCheckpoint, TruncatedFile) {
  Status s = open_error(original_.substr(0, 5));
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("truncated"), std::string::npos);
  s = open_error(original_.substr(0, original_.size() / 2));
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("past the end"), std::string::npos) << s.to_string();
}

TEST_F(BrokenCheckpoint, HeaderPointingPastTheEnd) {
  std::string bytes = original_;
  uint64_t huge = original_.size();
  std::memcpy(bytes.data(), &huge, 8);
  Status s = open_error(bytes);
  EXPECT_NE(s.message().find("header length"), std::string::npos) << s.to_string();
  auto h = header_;
  h["norm.weight"]["data_offsets"][1] = 1ull << 40;
  s = open_error(with_header(h));
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("norm.weight"), std::string::npos) << s.to_string();
}

TEST_F(BrokenCheckpoint, WrongDtypeAndShapeSize) {
  auto h = header_;
  h["norm.weight"]["dtype"] = "F64";
  Status s = open_error(with_header(h));
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("norm.weight"), std::string::npos);
  h = header_;
  h["norm.weight"]["dtype"] = "F32";  // 256 F32 values need 1024 bytes, not 512
  s = open_error(with_header(h));
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("norm.weight"), std::string::npos);
  // A dtype that sizes right but is not what the layout wants.
  h = header_;
  h["layers.0.attn.attn_sink"]["dtype"] = "I32";
  auto f = SafetensorsFile::open(write(with_header(h)));
  ASSERT_TRUE(f.is_ok());
}

TEST_F(BrokenCheckpoint, OverlappingTensors) {
  auto h = header_;
  h["norm.weight"]["data_offsets"] = h["embed.weight"]["data_offsets"];
  h["norm.weight"]["shape"] = h["embed.weight"]["shape"];
  Status s = open_error(with_header(h));
  EXPECT_NE(s.message().find("overlap"), std::string::npos) << s.to_string();
}

TEST_F(BrokenCheckpoint, MissingExtraAndMismatchedTensorsAgainstTheLayout) {
  auto cfg = load_model_config_dir(data("v41-tiny"));
  ASSERT_TRUE(cfg.is_ok());
  auto layout = v41_layout(*cfg);
  auto check = [&](const nlohmann::ordered_json& h) {
    auto ck = Checkpoint::open(write(with_header(h)));
    EXPECT_TRUE(ck.is_ok()) << ck.status().to_string();
    return ck.is_ok() ? check_checkpoint(**ck, layout) : ck.status();
  };
  auto h = header_;
  h.erase("layers.3.attn.wkv.weight");
  Status s = check(h);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("layers.3.attn.wkv.weight"), std::string::npos);
  h = header_;
  h["layers.3.attn.bonus"] = h["norm.weight"];
  h.erase("norm.weight");
  s = check(h);
  EXPECT_NE(s.message().find("norm.weight"), std::string::npos) << s.to_string();
  h = header_;
  h["layers.0.attn.attn_sink"]["dtype"] = "I32";
  s = check(h);
  EXPECT_NE(s.message().find("dtype I32"), std::string::npos) << s.to_string();
  // A config that does not match the weights: more heads.
  ModelConfig other = *cfg;
  other.n_heads = 16;
  auto ck = Checkpoint::open(data("v41-tiny"));
  s = check_checkpoint(**ck, v41_layout(other));
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("does config.json match"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace fathom::model
