#include "model/moe_gate.h"

#include <algorithm>
#include <cmath>

#include "kernels/dot.h"
#include "kernels/norm.h"

namespace fathom::model {

void route_token(const float* x, const MoeGateParams& p, int32_t* experts, float* weights,
                 bool fast) {
  float logits[kMaxExperts], score[kMaxExperts], biased[kMaxExperts];
  int32_t order[kMaxExperts];
  const int n = std::min(p.n_experts, kMaxExperts);
  if (fast) {
    for (int e = 0; e < n; ++e)
      logits[e] = float(kernels::dot_f64_lanes(x, p.weight + e * p.hidden, p.hidden));
  } else {
    kernels::ref::linear_f32(x, p.weight, 1, p.hidden, n, logits);
  }
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

}  // namespace fathom::model
