// mHC mixing in strict arithmetic against DeepSeek's reference run on the tiny V4.1 checkpoint
// (tests/data/model/v41-tiny/prefill_37_intermediates, copied from
// shared/golden/v41-tiny/prefill_37): block 9's residual bookkeeping — both HcMix sites,
// both hc_post updates and the final hc_pre — reproduced bit for bit from block 8's output
// and the golden sublayer outputs.
#include "model/mhc.h"

#include <gtest/gtest.h>

#include <cstring>

#include "model/npy.h"
#include "model/safetensors.h"

namespace fathom::model {
namespace {

constexpr int64_t kTokens = 37, kHidden = 256;

std::string data(const std::string& rel) {
  return std::string(FATHOM_TEST_DATA) + "/model/v41-tiny/" + rel;
}

NpyArray load(const std::string& name) {
  auto a = read_npy(data("prefill_37_intermediates/" + name + ".npy"));
  EXPECT_TRUE(a.is_ok()) << name << ": " << a.status().to_string();
  return a.is_ok() ? std::move(*a) : NpyArray{};
}

const float* f32(const Checkpoint& ck, const std::string& name, size_t elements) {
  const TensorInfo* t = ck.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return nullptr;
  EXPECT_EQ(t->dtype, DType::kF32) << name;
  EXPECT_EQ(t->elements(), elements) << name;
  return reinterpret_cast<const float*>(t->data);
}

size_t bit_differences(const float* a, const float* b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; ++i) d += std::memcmp(a + i, b + i, 4) != 0;
  return d;
}

TEST(Mhc, Block9ResidualMixingIsBitExact) {
  auto ck = Checkpoint::open(data(""));
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  NpyArray in = load("layer8_out"), attn = load("layer9_attn_out"), ffn = load("layer9_ffn_out");
  NpyArray pre_want = load("layer9_pre_mix"), out_want = load("layer9_out");
  NpyArray hidden_want = load("final_hidden");
  ASSERT_EQ(in.shape, (std::vector<int64_t>{kTokens, 4, kHidden}));
  ASSERT_EQ(out_want.shape, in.shape);
  ASSERT_EQ(pre_want.shape, (std::vector<int64_t>{kTokens, 4}));
  const size_t fn_size = 24 * 4 * kHidden;
  HcMixParams attn_site{f32(**ck, "layers.9.hc_attn_fn", fn_size),
                        f32(**ck, "layers.9.hc_attn_scale", 3),
                        f32(**ck, "layers.9.hc_attn_base", 24), kHidden};
  HcMixParams ffn_site{f32(**ck, "layers.9.hc_ffn_fn", fn_size),
                       f32(**ck, "layers.9.hc_ffn_scale", 3), f32(**ck, "layers.9.hc_ffn_base", 24),
                       kHidden};
  ASSERT_TRUE(attn_site.fn && attn_site.scale && attn_site.base);
  ASSERT_TRUE(ffn_site.fn && ffn_site.scale && ffn_site.base);

  std::vector<float> mid(4 * kHidden), out(in.f32.size()), pre(kTokens * 4),
      hidden(kTokens * kHidden);
  for (int64_t t = 0; t < kTokens; ++t) {
    const float* x = &in.f32[t * 4 * kHidden];
    hc_post(hc_mix(x, attn_site), &attn.f32[t * kHidden], x, kHidden, mid.data());
    HcMix f = hc_mix(mid.data(), ffn_site);
    hc_post(f, &ffn.f32[t * kHidden], mid.data(), kHidden, &out[t * 4 * kHidden]);
    std::memcpy(&pre[t * 4], f.pre, sizeof f.pre);
    hc_pre(f.pre, &out[t * 4 * kHidden], kHidden, &hidden[t * kHidden]);
  }
  EXPECT_EQ(bit_differences(pre.data(), pre_want.f32.data(), pre.size()), 0u);
  EXPECT_EQ(bit_differences(out.data(), out_want.f32.data(), out.size()), 0u);
  // Block 9 is the last: the model's final hidden is hc_pre with its returned pre.
  EXPECT_EQ(bit_differences(hidden.data(), hidden_want.f32.data(), hidden.size()), 0u);
}

TEST(Mhc, CombIsDoublyStochastic) {
  // Independent of the golden data: Sinkhorn ends on a column step, so columns sum to 1 to
  // rounding; rows have converged to within a fraction of a percent after 20 rounds.
  std::vector<float> fn(24 * 4 * 8), streams(4 * 8);
  for (size_t i = 0; i < fn.size(); ++i) fn[i] = float((i * 37) % 17) / 17.0f - 0.5f;
  for (size_t i = 0; i < streams.size(); ++i) streams[i] = float((i * 11) % 7) - 3.0f;
  const float scale[3] = {1.0f, 1.0f, 1.0f};
  float base[24] = {};
  HcMix m = hc_mix(streams.data(), HcMixParams{fn.data(), scale, base, 8});
  for (int a = 0; a < 4; ++a) {
    float row = 0, col = 0;
    for (int b = 0; b < 4; ++b) row += m.comb[a][b], col += m.comb[b][a];
    EXPECT_NEAR(row, 1.0f, 1e-3f);
    EXPECT_NEAR(col, 1.0f, 1e-5f);
    EXPECT_GT(m.pre[a], 0.0f);
    EXPECT_LT(m.post[a], 2.0f);
  }
}

}  // namespace
}  // namespace fathom::model
