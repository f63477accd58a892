#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace fathom::engine {
namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

double counter_uniform(uint64_t seed, uint64_t request, uint64_t position) {
  uint64_t h = mix(seed + 0x9E3779B97F4A7C15ull);
  h = mix(h ^ (request + 0x632BE59BD9B4E019ull));
  h = mix(h ^ (position + 0x85157AF5DB1BC6E1ull));
  return double(h >> 11) * 0x1p-53;
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p,
                     std::span<const int32_t> prompt, std::span<const int32_t> generated,
                     uint64_t request, uint64_t position, std::vector<float>& scratch) {
  scratch.assign(logits, logits + vocab);
  float* l = scratch.data();
  if (p.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t t) {
      if (t < 0 || t >= vocab) return;
      l[t] = l[t] > 0 ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
    };
    std::vector<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(seen.end(), generated.begin(), generated.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t t : seen) penalize(t);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : generated) ++counts[t];
    for (auto [t, n] : counts)
      if (t >= 0 && t < vocab) l[t] -= p.presence_penalty + p.frequency_penalty * float(n);
  }
  if (p.temperature <= 0.0f) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (l[i] > l[best]) best = i;
    return int32_t(best);
  }
  // Candidates by descending logit (ties to the lower id), truncated by top-k.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, vocab) : vocab;
  auto cmp = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  if (k < vocab) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
    order.resize(size_t(k));
  } else {
    std::sort(order.begin(), order.end(), cmp);
  }
  const double inv_t = 1.0 / double(p.temperature);
  const double top = double(l[order[0]]);
  std::vector<double> prob(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i)
    sum += prob[i] = std::exp((double(l[order[i]]) - top) * inv_t);
  size_t n = order.size();
  if (p.min_p > 0.0f) {
    const double floor = double(p.min_p) * prob[0];  // relative to the most likely token
    while (n > 1 && prob[n - 1] < floor) sum -= prob[--n];
  }
  if (p.top_p < 1.0f) {
    double acc = 0;
    size_t keep = 0;
    while (keep < n) {
      acc += prob[keep++];
      if (acc >= double(p.top_p) * sum) break;
    }
    n = keep;
    sum = 0;
    for (size_t i = 0; i < n; ++i) sum += prob[i];
  }
  const double u = counter_uniform(p.seed, request, position) * sum;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += prob[i];
    if (u < acc) return order[i];
  }
  return order[n - 1];
}

}  // namespace fathom::engine
