// The last steps of the V4.1 forward pass — final RMSNorm and the head — in strict
// arithmetic against DeepSeek's reference (tests/data/model/v41-tiny, from
// shared/golden/v41-tiny/prefill_37*): bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/norm.h"
#include "kernels/quant.h"
#include "model/npy.h"
#include "model/safetensors.h"

namespace fathom::model {
namespace {

std::string data(const std::string& rel) {
  return std::string(FATHOM_TEST_DATA) + "/model/v41-tiny/" + rel;
}

std::vector<float> bf16_tensor(const Checkpoint& ck, const std::string& name) {
  const TensorInfo* t = ck.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  EXPECT_EQ(t->dtype, DType::kBF16);
  std::vector<float> out(t->elements());
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, t->data + 2 * i, 2);
    out[i] = kernels::bf16_to_float(h);
  }
  return out;
}

size_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
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
  EXPECT_EQ(bit_differences(y, normed->f32), 0u);
  // The head is an fp32 linear of the bf16 normed hidden.
  std::vector<float> head = bf16_tensor(**ck, "head.weight");
  std::vector<float> out(size_t(37 * 1024));
  kernels::ref::linear_f32(normed->f32.data(), head.data(), 37, 256, 1024, out.data());
  EXPECT_EQ(bit_differences(out, logits->f32), 0u);
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
