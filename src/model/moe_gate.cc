#include "model/moe_gate.h"

#include <algorithm>
#include <cmath>

#include "kernels/dot.h"
#include "kernels/norm.h"

namespace fathom::model {

namespace {

// The top-k of the scores from the gate's logits (as fp32).
void route_from_logits(const float* logits, const MoeGateParams& p, int n, int32_t* experts,
                       float* weights) {
  float score[kMaxExperts], biased[kMaxExperts];
  int32_t order[kMaxExperts];
  for (int e = 0; e < n; ++e) {
    const double z = logits[e];
    const float softplus = float(z > 20.0 ? z : std::log1p(std::exp(z)));
    score[e] = std::sqrt(softplus);
    biased[e] = score[e] + p.bias[e];
    order[e] = e;
  }
  const int k = std::min(p.top_k, n);
  std::partial_sort(order, order + k, order + n, [&](int32_t a, int32_t b) {
    return biased[a] != biased[b] ? biased[a] > biased[b] : a < b;
  });
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += score[order[i]];
  const float denom = float(sum) + 1e-20f;
  for (int i = 0; i < k; ++i) {
    experts[i] = order[i];
    weights[i] = score[order[i]] / denom * p.route_scale;
  }
}

}  // namespace

void route_token(const float* x, const MoeGateParams& p, int32_t* experts, float* weights,
                 bool fast) {
  float logits[kMaxExperts];
  const int n = std::min(p.n_experts, kMaxExperts);
  if (fast) {
    for (int e = 0; e < n; ++e)
      logits[e] = float(kernels::dot_f64_lanes(x, p.weight + e * p.hidden, p.hidden));
  } else {
    kernels::ref::linear_f32(x, p.weight, 1, p.hidden, n, logits);
  }
  route_from_logits(logits, p, n, experts, weights);
}

void route_tokens_fast(const float* x, int64_t rows, const MoeGateParams& p, int32_t* experts,
                       float* weights) {
  constexpr int64_t kGroup = 8;
  const int n = std::min(p.n_experts, kMaxExperts);
  double d[kGroup * (kMaxExperts + 1)];
  float logits[kMaxExperts];
  for (int64_t t0 = 0; t0 < rows; t0 += kGroup) {
    const int64_t nb = std::min(kGroup, rows - t0);
    kernels::cpu::dots_f64_lanes(x + t0 * p.hidden, nb, p.hidden, p.weight, n, d);
    for (int64_t b = 0; b < nb; ++b) {
      for (int e = 0; e < n; ++e) logits[e] = float(d[b * (n + 1) + e]);
      route_from_logits(logits, p, n, experts + (t0 + b) * p.top_k, weights + (t0 + b) * p.top_k);
    }
  }
}

}  // namespace fathom::model
