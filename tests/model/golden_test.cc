// The per-block pieces of the V4.1 forward in strict arithmetic against DeepSeek's reference
// run on the tiny checkpoint (tests/data/model/v41-tiny/prefill_37{,_intermediates}, copied
// from shared/golden/v41-tiny): every block's mHC bookkeeping — both HcMix sites and both
// hc_post updates — from the block's input streams and the golden sublayer outputs, the final
// hc_pre, every block's MoE routing and MoE output from the FFN input that mHC yields, and
// the final norm and head; all bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "kernels/norm.h"
#include "kernels/quant.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/moe_gate.h"
#include "model/npy.h"
#include "model/safetensors.h"

namespace fathom::model {
namespace {

constexpr int64_t kTokens = 37, kHidden = 256;

std::string data(const std::string& rel) {
  return std::string(FATHOM_TEST_DATA) + "/model/v41-tiny/" + rel;
}

NpyArray load(const std::string& name, const char* dir = "prefill_37_intermediates/") {
  auto a = read_npy(data(dir + name + ".npy"));
  EXPECT_TRUE(a.is_ok()) << name << ": " << a.status().to_string();
  return a.is_ok() ? std::move(*a) : NpyArray{};
}

size_t bit_differences(const float* a, const float* b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; ++i) d += std::memcmp(a + i, b + i, 4) != 0;
  return d;
}

const float* f32(const Checkpoint& ck, const std::string& name, size_t elements) {
  const TensorInfo* t = ck.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return nullptr;
  EXPECT_EQ(t->dtype, DType::kF32) << name;
  EXPECT_EQ(t->elements(), elements) << name;
  return reinterpret_cast<const float*>(t->data);
}

std::vector<float> bf16_tensor(const Checkpoint& ck, const std::string& name) {
  const TensorInfo* t = ck.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr || t->dtype != DType::kBF16) return {};
  std::vector<float> out(t->elements());
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, t->data + 2 * i, 2);
    out[i] = kernels::bf16_to_float(h);
  }
  return out;
}

HcMixParams site(const Checkpoint& ck, int layer, const char* which) {
  const std::string p = "layers." + std::to_string(layer) + ".hc_" + which;
  return HcMixParams{f32(ck, p + "_fn", 24 * 4 * kHidden), f32(ck, p + "_scale", 3),
                     f32(ck, p + "_base", 24), kHidden};
}

// The residual streams entering block `layer`: the embedding copied to 4 streams for block 0,
// the Engram's output where one precedes the block (1 and 4 in the tiny model), else the
// previous block's output.
NpyArray block_input(int layer) {
  if (layer == 0) {
    NpyArray e = load("embed_out");
    NpyArray x;
    x.shape = {kTokens, 4, kHidden};
    x.f32.resize(size_t(kTokens * 4 * kHidden));
    for (int64_t t = 0; t < kTokens && !e.f32.empty(); ++t)
      for (int j = 0; j < 4; ++j)
        std::memcpy(&x.f32[(t * 4 + j) * kHidden], &e.f32[t * kHidden], kHidden * sizeof(float));
    return x;
  }
  if (layer == 1 || layer == 4) return load("layer" + std::to_string(layer) + "_engram_out");
  return load("layer" + std::to_string(layer - 1) + "_out");
}

// Block l's normed FFN input for one token: RMSNorm_ffn(hc_pre(attention-site pre, the
// streams after the attention hc_post)).
void ffn_input(const HcMixParams& attn_site, const float* streams, const float* attn_out,
               const std::vector<float>& norm_w, float* normed) {
  float mid[4 * kHidden], x[kHidden];
  HcMix a = hc_mix(streams, attn_site);
  hc_post(a, attn_out, streams, kHidden, mid);
  hc_pre(a.pre, mid, kHidden, x);
  kernels::ref::rmsnorm_bf16(x, norm_w.data(), 1, kHidden, 1e-20f, normed);
}

TEST(Mhc, EveryBlocksResidualMixingIsBitExact) {
  auto ck = Checkpoint::open(data(""));
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  std::vector<float> mid(4 * kHidden), out(size_t(kTokens * 4 * kHidden)), pre(kTokens * 4);
  for (int layer = 0; layer < 10; ++layer) {
    SCOPED_TRACE("block " + std::to_string(layer));
    const std::string l = "layer" + std::to_string(layer);
    NpyArray in = block_input(layer), attn = load(l + "_attn_out"), ffn = load(l + "_ffn_out");
    NpyArray pre_want = load(l + "_pre_mix"), out_want = load(l + "_out");
    ASSERT_EQ(in.shape, (std::vector<int64_t>{kTokens, 4, kHidden}));
    ASSERT_EQ(out_want.shape, in.shape);
    ASSERT_EQ(pre_want.shape, (std::vector<int64_t>{kTokens, 4}));
    HcMixParams attn_site = site(**ck, layer, "attn"), ffn_site = site(**ck, layer, "ffn");
    ASSERT_TRUE(attn_site.fn && attn_site.scale && attn_site.base);
    ASSERT_TRUE(ffn_site.fn && ffn_site.scale && ffn_site.base);
    for (int64_t t = 0; t < kTokens; ++t) {
      const float* x = &in.f32[t * 4 * kHidden];
      hc_post(hc_mix(x, attn_site), &attn.f32[t * kHidden], x, kHidden, mid.data());
      HcMix f = hc_mix(mid.data(), ffn_site);
      hc_post(f, &ffn.f32[t * kHidden], mid.data(), kHidden, &out[t * 4 * kHidden]);
      std::memcpy(&pre[t * 4], f.pre, sizeof f.pre);
    }
    EXPECT_EQ(bit_differences(pre.data(), pre_want.f32.data(), pre.size()), 0u);
    EXPECT_EQ(bit_differences(out.data(), out_want.f32.data(), out.size()), 0u);
  }
}

TEST(Mhc, FinalHcPreIsBitExact) {
  // Block 9 is the last: the model's final hidden is hc_pre of its output with its pre.
  NpyArray x = load("layer9_out"), pre = load("layer9_pre_mix"), want = load("final_hidden");
  ASSERT_EQ(want.shape, (std::vector<int64_t>{kTokens, kHidden}));
  ASSERT_EQ(x.f32.size(), size_t(kTokens * 4 * kHidden));
  ASSERT_EQ(pre.f32.size(), size_t(kTokens * 4));
  std::vector<float> hidden(size_t(kTokens * kHidden));
  for (int64_t t = 0; t < kTokens; ++t)
    hc_pre(&pre.f32[t * 4], &x.f32[t * 4 * kHidden], kHidden, &hidden[t * kHidden]);
  EXPECT_EQ(bit_differences(hidden.data(), want.f32.data(), hidden.size()), 0u);
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

// The batched fast mixes (four rows sharing each converted fn value) are hc_mix_fast's, bit
// for bit, for every row of a batch of 1..9 rows; and within the fast band of the strict mix.
TEST(Mhc, FastRowsAreFastMixBitForBit) {
  std::mt19937 rng(29);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t hidden = 40;  // 160 values a row: twenty 8-lane steps
  std::vector<float> fn(size_t(24 * 4 * hidden)), scale = {0.7f, 1.1f, 0.9f}, base(24);
  for (auto& v : fn) v = g(rng) * 0.05f;
  for (auto& v : base) v = g(rng) * 0.1f;
  const HcMixParams p{fn.data(), scale.data(), base.data(), hidden};
  for (int64_t rows = 1; rows <= 9; ++rows) {
    std::vector<float> streams(size_t(rows * 4 * hidden));
    for (auto& v : streams) v = kernels::round_to_bf16(g(rng));
    std::vector<HcMix> got(static_cast<size_t>(rows));
    hc_mix_fast_rows(streams.data(), rows, p, got.data());
    for (int64_t t = 0; t < rows; ++t) {
      const HcMix want = hc_mix_fast(streams.data() + t * 4 * hidden, p);
      EXPECT_EQ(std::memcmp(&want, &got[size_t(t)], sizeof(HcMix)), 0)
          << rows << " rows, row " << t;
      const HcMix strict = hc_mix(streams.data() + t * 4 * hidden, p);
      for (int j = 0; j < 4; ++j) EXPECT_NEAR(got[size_t(t)].pre[j], strict.pre[j], 1e-5f);
    }
  }
}

TEST(MoeGate, EveryBlockRoutesAsTheReference) {
  // The FFN input of block l is RMSNorm_ffn(hc_pre(attention-site pre, streams after the
  // attention update)); the router must pick the golden experts with the golden weights.
  auto ck = Checkpoint::open(data(""));
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  constexpr int kExperts = 8, kTopK = 2;
  std::vector<float> normed(kHidden);
  for (int layer = 0; layer < 10; ++layer) {
    SCOPED_TRACE("block " + std::to_string(layer));
    const std::string l = std::to_string(layer), p = "layers." + l + ".";
    NpyArray in = block_input(layer), attn = load("layer" + l + "_attn_out");
    NpyArray want_idx = load("prefill_gate_idx_L" + l, "prefill_37/");
    NpyArray want_w = load("prefill_gate_w_L" + l, "prefill_37/");
    ASSERT_EQ(want_idx.shape, (std::vector<int64_t>{kTokens, kTopK}));
    ASSERT_EQ(want_w.shape, want_idx.shape);
    HcMixParams attn_site = site(**ck, layer, "attn");
    ASSERT_TRUE(attn_site.fn && attn_site.scale && attn_site.base);
    std::vector<float> norm_w = bf16_tensor(**ck, p + "ffn_norm.weight");
    std::vector<float> gate_w = bf16_tensor(**ck, p + "ffn.gate.weight");
    ASSERT_EQ(norm_w.size(), size_t(kHidden));
    ASSERT_EQ(gate_w.size(), size_t(kExperts * kHidden));
    MoeGateParams gate{
        gate_w.data(), f32(**ck, p + "ffn.gate.bias", kExperts), kHidden, kExperts, kTopK, 1.5f};
    ASSERT_NE(gate.bias, nullptr);
    size_t wrong_experts = 0, wrong_weights = 0;
    for (int64_t t = 0; t < kTokens; ++t) {
      ffn_input(attn_site, &in.f32[t * 4 * kHidden], &attn.f32[t * kHidden], norm_w, normed.data());
      int32_t experts[kTopK];
      float weights[kTopK];
      route_token(normed.data(), gate, experts, weights);
      for (int k = 0; k < kTopK; ++k) {
        wrong_experts += experts[k] != want_idx.i64[t * kTopK + k];
        wrong_weights += std::memcmp(&weights[k], &want_w.f32[t * kTopK + k], 4) != 0;
      }
    }
    EXPECT_EQ(wrong_experts, 0u);
    EXPECT_EQ(wrong_weights, 0u);
  }
}

TEST(MoeGate, TiesGoToTheLowerExpert) {
  // Independent of the golden data: equal scores (a zero weight row gives every expert the
  // same score) select experts 0 and 1, weighted equally to route_scale / k.
  std::vector<float> w(4 * 8, 0.0f), x(8, 1.0f);
  const float bias[4] = {0, 0, 0, 0};
  int32_t experts[2];
  float weights[2];
  route_token(x.data(), MoeGateParams{w.data(), bias, 8, 4, 2, 1.5f}, experts, weights);
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(experts[1], 1);
  EXPECT_FLOAT_EQ(weights[0], 0.75f);
  EXPECT_FLOAT_EQ(weights[1], 0.75f);
  // A bias moves selection but not the weights' source: expert 3 wins on bias alone.
  const float biased[4] = {0, 0, 0, 1.0f};
  route_token(x.data(), MoeGateParams{w.data(), biased, 8, 4, 2, 1.5f}, experts, weights);
  EXPECT_EQ(experts[0], 3);
  EXPECT_EQ(experts[1], 0);
  EXPECT_FLOAT_EQ(weights[0], 0.75f);
}

TEST(MoeGate, ManyTokensRouteAsEachAlone) {
  // route_tokens_fast takes up to eight tokens per pass over the gate's weights; each token's
  // experts and weights must be route_token(fast)'s bit for bit, whatever the row count.
  std::mt19937 rng(53);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t hidden = 264;  // 33 eight-lane steps: a full chunk and a partial one
  const int n = 32, k = 6;
  std::vector<float> w(size_t(n * hidden)), bias(static_cast<size_t>(n));
  for (auto& v : w) v = kernels::round_to_bf16(g(rng) * 0.1f);
  for (auto& v : bias) v = g(rng) * 0.01f;
  const MoeGateParams p{w.data(), bias.data(), hidden, n, k, 1.5f};
  for (int64_t rows : {1, 3, 8, 9, 17}) {
    std::vector<float> x(size_t(rows * hidden));
    for (auto& v : x) v = kernels::round_to_bf16(g(rng));
    std::vector<int32_t> experts(size_t(rows * k));
    std::vector<float> weights(size_t(rows * k));
    route_tokens_fast(x.data(), rows, p, experts.data(), weights.data());
    for (int64_t t = 0; t < rows; ++t) {
      int32_t want_e[k];
      float want_w[k];
      route_token(x.data() + t * hidden, p, want_e, want_w, true);
      EXPECT_EQ(std::memcmp(want_e, &experts[size_t(t * k)], sizeof want_e), 0)
          << rows << " rows, row " << t;
      EXPECT_EQ(std::memcmp(want_w, &weights[size_t(t * k)], sizeof want_w), 0)
          << rows << " rows, row " << t;
    }
  }
}

TEST(Moe, EveryBlocksFfnOutputIsBitExact) {
  // Routing, the FP4 routed experts and the FP8 shared expert from the FFN input that mHC
  // yields must reproduce the golden sublayer output layer{l}_ffn_out.
  auto ck = Checkpoint::open(data(""));
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  constexpr int kExperts = 8, kTopK = 2, kInter = 128;
  std::vector<float> normed(kHidden), y(kHidden);
  for (int layer = 0; layer < 10; ++layer) {
    SCOPED_TRACE("block " + std::to_string(layer));
    const std::string l = std::to_string(layer), p = "layers." + l + ".";
    NpyArray in = block_input(layer), attn = load("layer" + l + "_attn_out");
    NpyArray want = load("layer" + l + "_ffn_out");
    ASSERT_EQ(want.shape, (std::vector<int64_t>{kTokens, kHidden}));
    HcMixParams attn_site = site(**ck, layer, "attn");
    ASSERT_TRUE(attn_site.fn && attn_site.scale && attn_site.base);
    std::vector<float> norm_w = bf16_tensor(**ck, p + "ffn_norm.weight");
    std::vector<float> gate_w = bf16_tensor(**ck, p + "ffn.gate.weight");
    ASSERT_EQ(gate_w.size(), size_t(kExperts * kHidden));
    MoeGateParams gate{
        gate_w.data(), f32(**ck, p + "ffn.gate.bias", kExperts), kHidden, kExperts, kTopK, 1.5f};
    auto moe = moe_weights(**ck, p + "ffn.", kExperts, kHidden, kInter, 10.0f);
    ASSERT_TRUE(moe.is_ok()) << moe.status().to_string();
    size_t wrong = 0;
    for (int64_t t = 0; t < kTokens; ++t) {
      ffn_input(attn_site, &in.f32[t * 4 * kHidden], &attn.f32[t * kHidden], norm_w, normed.data());
      int32_t experts[kTopK];
      float weights[kTopK];
      route_token(normed.data(), gate, experts, weights);
      moe_forward(*moe, normed.data(), experts, weights, kTopK, y.data());
      wrong += bit_differences(y.data(), &want.f32[t * kHidden], kHidden);
    }
    EXPECT_EQ(wrong, 0u);
  }
}

TEST(Moe, RejectsMissingOrMisshapenExperts) {
  auto ck = Checkpoint::open(data(""));
  ASSERT_TRUE(ck.is_ok());
  EXPECT_EQ(moe_weights(**ck, "layers.9.ffn.", 9, kHidden, 128, 10.0f).status().code(),
            StatusCode::kNotFound);  // there is no expert 8
  EXPECT_EQ(moe_weights(**ck, "layers.9.ffn.", 8, kHidden, 96, 10.0f).status().code(),
            StatusCode::kCorrupt);  // inter 96 does not match the tensors
}

TEST(GoldenTail, FinalNormAndHeadAreBitExact) {
  auto ck = Checkpoint::open(data(""));
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  auto hidden = read_npy(data("prefill_37_intermediates/final_hidden.npy"));
  auto normed = read_npy(data("prefill_37_intermediates/final_norm_out.npy"));
  auto logits = read_npy(data("prefill_37/prefill_logits.npy"));
  ASSERT_TRUE(hidden.is_ok() && normed.is_ok() && logits.is_ok());
  ASSERT_EQ(hidden->shape, (std::vector<int64_t>{37, 256}));
  std::vector<float> weight = bf16_tensor(**ck, "norm.weight");
  std::vector<float> y(hidden->elements());
  kernels::ref::rmsnorm_bf16(hidden->f32.data(), weight.data(), 37, 256, 1e-20f, y.data());
  ASSERT_EQ(normed->f32.size(), y.size());
  EXPECT_EQ(bit_differences(y.data(), normed->f32.data(), y.size()), 0u);
  // The head is an fp32 linear of the bf16 normed hidden.
  std::vector<float> head = bf16_tensor(**ck, "head.weight");
  std::vector<float> out(size_t(37 * 1024));
  kernels::ref::linear_f32(normed->f32.data(), head.data(), 37, 256, 1024, out.data());
  ASSERT_EQ(logits->f32.size(), out.size());
  EXPECT_EQ(bit_differences(out.data(), logits->f32.data(), out.size()), 0u);
  // The fast RMSNorm (fp32 accumulation) lands within one bf16 step of the strict one.
  std::vector<float> fast(y.size());
  kernels::cpu::rmsnorm_bf16(hidden->f32.data(), weight.data(), 37, 256, 1e-20f, fast.data());
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_LE(std::fabs(fast[i] - y[i]), std::fabs(y[i]) * (1.0f / 128) + 1e-30f) << i;
  }
}

TEST(Npy, RejectsBadFiles) {
  EXPECT_EQ(read_npy("/nonexistent.npy").status().code(), StatusCode::kNotFound);
  std::string p = ::testing::TempDir() + "bad.npy";
  FILE* f = std::fopen(p.c_str(), "wb");
  std::fputs("\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'", f);
  std::fclose(f);
  EXPECT_EQ(read_npy(p).status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace fathom::model
