#include "model/moe.h"

#include <algorithm>
#include <cmath>

#include "kernels/norm.h"
#include "kernels/quant.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace fathom::model {
namespace {

constexpr int64_t kMaxDim = 8192;

// One projection [out, in] as FP4 (two codes per byte, scale [out, in/32]) or FP8 (32x32).
Status projection(const Checkpoint& ck, const std::string& name, bool fp4, int64_t out, int64_t in,
                  kernels::Fp4Matrix* m4, kernels::Fp8Matrix* m8) {
  if (fp4) {
    FATHOM_ASSIGN_OR_RETURN(const TensorInfo* w,
                            find_tensor(ck, name + ".weight", DType::kI8, {out, in / 2}));
    FATHOM_ASSIGN_OR_RETURN(const TensorInfo* s,
                            find_tensor(ck, name + ".scale", DType::kF8E8M0, {out, in / 32}));
    *m4 = kernels::Fp4Matrix{w->data, s->data, out, in};
  } else {
    FATHOM_ASSIGN_OR_RETURN(const TensorInfo* w,
                            find_tensor(ck, name + ".weight", DType::kF8E4M3, {out, in}));
    FATHOM_ASSIGN_OR_RETURN(const TensorInfo* s, find_tensor(ck, name + ".scale", DType::kF8E8M0,
                                                             {(out + 31) / 32, (in + 31) / 32}));
    *m8 = kernels::Fp8Matrix{w->data, s->data, out, in};
  }
  return Status::ok();
}

Status expert(const Checkpoint& ck, const std::string& prefix, bool fp4, int64_t hidden,
              int64_t inter, ExpertWeights* e) {
  e->fp4 = fp4;
  e->hidden = hidden;
  e->inter = inter;
  Status s = projection(ck, prefix + "w1", fp4, inter, hidden, &e->w1_fp4, &e->w1_fp8);
  if (s.is_ok()) s = projection(ck, prefix + "w3", fp4, inter, hidden, &e->w3_fp4, &e->w3_fp8);
  if (s.is_ok()) s = projection(ck, prefix + "w2", fp4, hidden, inter, &e->w2_fp4, &e->w2_fp8);
  return s;
}

// x is already fake-quantised; y rounded once to bf16.
void project(const ExpertWeights& e, const kernels::Fp4Matrix& m4, const kernels::Fp8Matrix& m8,
             const float* x, float* y) {
  if (e.fp4)
    kernels::ref::matmul_fp4(m4, x, 1, y, kernels::OutRounding::kBF16);
  else
    kernels::ref::matmul_fp8(m8, x, 1, y, kernels::OutRounding::kBF16);
}

// One expert on the quantised input xq; a routed expert scales its hidden by `weight`.
void run_expert(const ExpertWeights& e, const float* xq, const float* weight, float limit,
                float* y) {
  float g[kMaxDim], u[kMaxDim];
  project(e, e.w1_fp4, e.w1_fp8, xq, g);
  project(e, e.w3_fp4, e.w3_fp8, xq, u);
  for (int64_t i = 0; i < e.inter; ++i) {
    const float up = std::clamp(u[i], -limit, limit);
    const float gate = std::min(g[i], limit);
    const float silu = float(double(gate) / (1.0 + std::exp(-double(gate))));
    float h = silu * up;
    if (weight != nullptr) h = h * *weight;
    g[i] = kernels::round_to_bf16(h);
  }
  kernels::ref::fake_quant_e4m3(g, e.inter, g);
  project(e, e.w2_fp4, e.w2_fp8, g, y);
}

}  // namespace

Result<MoeWeights> moe_weights(const Checkpoint& ck, const std::string& prefix, int n_routed,
                               int64_t hidden, int64_t inter, float swiglu_limit) {
  if (hidden <= 0 || inter <= 0 || hidden > kMaxDim || inter > kMaxDim || hidden % 32 ||
      inter % 32 || n_routed <= 0)
    return unsupported("MoE sizes outside what the strict experts support");
  MoeWeights w;
  w.swiglu_limit = swiglu_limit;
  w.routed.resize(size_t(n_routed));
  for (int e = 0; e < n_routed; ++e) {
    Status s = expert(ck, prefix + "experts." + std::to_string(e) + ".", true, hidden, inter,
                      &w.routed[size_t(e)]);
    if (!s.is_ok()) return s;
  }
  Status s = expert(ck, prefix + "shared_experts.", false, hidden, inter, &w.shared);
  if (!s.is_ok()) return s;
  return w;
}

void moe_forward(const MoeWeights& w, const float* x, const int32_t* experts, const float* weights,
                 int k, float* y) {
  const int64_t hidden = w.shared.hidden;
  float xq[kMaxDim], out[kMaxDim], acc[kMaxDim];
  kernels::ref::fake_quant_e4m3(x, hidden, xq);
  std::fill(acc, acc + hidden, 0.0f);
  // The reference visits experts by index, adding each one's tokens in turn.
  for (int32_t e = 0; e < int32_t(w.routed.size()); ++e) {
    for (int j = 0; j < k; ++j) {
      if (experts[j] != e) continue;
      run_expert(w.routed[size_t(e)], xq, &weights[j], w.swiglu_limit, out);
      for (int64_t i = 0; i < hidden; ++i) acc[i] += out[i];
    }
  }
  run_expert(w.shared, xq, nullptr, w.swiglu_limit, out);
  for (int64_t i = 0; i < hidden; ++i) y[i] = kernels::round_to_bf16(acc[i] + out[i]);
}

}  // namespace fathom::model
