#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/argmax.h"

namespace fathom::engine {
namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The logits after `adjust` and the penalties: `logits` itself when nothing applies, else a
// copy in scratch.
const float* penalized(const float* logits, int64_t vocab, const SamplingParams& p,
                       std::span<const int32_t> prompt, std::span<const int32_t> generated,
                       const LogitAdjust& adjust, SamplerScratch& scratch) {
  if (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
      adjust.empty())
    return logits;
  scratch.logits.assign(logits, logits + vocab);
  float* l = scratch.logits.data();
  for (int32_t t : adjust.banned)
    if (t >= 0 && t < vocab) l[t] = -std::numeric_limits<float>::infinity();
  for (const auto& [t, b] : adjust.bias)
    if (t >= 0 && t < vocab) l[t] += b;
  if (p.repetition_penalty != 1.0f) {
    // Each id seen in the prompt or the output once, marked and unmarked in place. A penalty
    // too small for a float (the API's (0, 10] read as a float can be 0 or subnormal) is the
    // smallest normal one, and a logit it divides stays finite: the largest float, not inf,
    // so the softmax below never subtracts inf from inf.
    const float rp = std::max(p.repetition_penalty, std::numeric_limits<float>::min());
    std::vector<uint8_t>& seen = scratch.seen;
    if (int64_t(seen.size()) < vocab) seen.assign(size_t(vocab), 0);
    auto penalize = [&](int32_t t) {
      if (t < 0 || t >= vocab || seen[size_t(t)]) return;
      seen[size_t(t)] = 1;
      l[t] = l[t] > 0 ? std::min(l[t] / rp, std::numeric_limits<float>::max()) : l[t] * rp;
    };
    for (int32_t t : prompt) penalize(t);
    for (int32_t t : generated) penalize(t);
    for (auto span : {prompt, generated})
      for (int32_t t : span)
        if (t >= 0 && t < vocab) seen[size_t(t)] = 0;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::vector<int32_t>& counts = scratch.counts;
    if (int64_t(counts.size()) < vocab) counts.assign(size_t(vocab), 0);
    for (int32_t t : generated)
      if (t >= 0 && t < vocab) ++counts[size_t(t)];
    for (int32_t t : generated) {
      if (t < 0 || t >= vocab || counts[size_t(t)] == 0) continue;
      l[t] -= p.presence_penalty + p.frequency_penalty * float(counts[size_t(t)]);
      counts[size_t(t)] = 0;
    }
  }
  return l;
}

// Whether p samples greedily: temperature 0, or one so small that 1/T is not a finite float
// (its limit: softmax(l / T) puts all the mass on the maximum, where exp((l - top) / T)
// would compute 0 * inf).
bool greedy(const SamplingParams& p) {
  return p.temperature <= 0.0f || !std::isfinite(1.0f / p.temperature);
}

}  // namespace

void token_logprob(const float* logits, int64_t vocab, const SamplingParams& p,
                   std::span<const int32_t> prompt, std::span<const int32_t> generated,
                   int32_t token, int top_n, SamplerScratch& scratch, TokenLogprob* out,
                   const LogitAdjust& adjust) {
  const float* l = penalized(logits, vocab, p, prompt, generated, adjust, scratch);
  const double scale = greedy(p) ? 1.0 : 1.0 / double(p.temperature);
  float top = l[0];
  for (int64_t i = 1; i < vocab; ++i) top = std::max(top, l[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp((double(l[i]) - double(top)) * scale);
  const double log_z = double(top) * scale + std::log(sum);
  auto logprob = [&](int64_t i) { return float(double(l[i]) * scale - log_z); };
  out->token = token;
  out->logprob = token >= 0 && token < vocab ? logprob(token) : -INFINITY;
  // The top_n largest logits, kept sorted (descending, ties to the lower id) by insertion.
  const int n = std::clamp(top_n, 0, kMaxTopLogprobs);
  int count = 0;
  std::array<int32_t, kMaxTopLogprobs> ids{};
  for (int64_t i = 0; i < vocab && n > 0; ++i) {
    if (count == n && !(l[i] > l[ids[size_t(n - 1)]])) continue;
    int j = count < n ? count++ : n - 1;
    while (j > 0 && l[i] > l[ids[size_t(j - 1)]]) {
      ids[size_t(j)] = ids[size_t(j - 1)];
      --j;
    }
    ids[size_t(j)] = int32_t(i);
  }
  out->top_count = count;
  for (int k = 0; k < count; ++k) out->top[size_t(k)] = {ids[size_t(k)], logprob(ids[size_t(k)])};
}

double counter_uniform(uint64_t seed, uint64_t request, uint64_t position) {
  uint64_t h = mix(seed + 0x9E3779B97F4A7C15ull);
  h = mix(h ^ (request + 0x632BE59BD9B4E019ull));
  h = mix(h ^ (position + 0x85157AF5DB1BC6E1ull));
  return double(h >> 11) * 0x1p-53;
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p,
                     std::span<const int32_t> prompt, std::span<const int32_t> generated,
                     uint64_t request, uint64_t position, SamplerScratch& scratch,
                     std::span<const int32_t> allowed, const LogitAdjust& adjust) {
  const float* l = penalized(logits, vocab, p, prompt, generated, adjust, scratch);
  if (greedy(p)) {
    if (!allowed.empty()) {
      int32_t best = allowed[0];
      for (int32_t i : allowed)
        if (l[i] > l[best]) best = i;
      return best;
    }
    return int32_t(kernels::cpu::argmax_first(l, vocab));  // the first maximum
  }
  // Candidates: all ids in id order, or the top-k by logit (ties to the lower id), in
  // descending order. Sorting the whole vocabulary is avoided unless top-p needs an order.
  auto cmp = [&](int32_t x, int32_t y) { return l[x] > l[y] || (l[x] == l[y] && x < y); };
  // With `allowed`, the other ids (at -inf, weight 0) are left out: the same cumulative sums
  // in the same order, so the same draw.
  std::vector<int32_t>& cand = scratch.cand;
  if (allowed.empty()) {
    cand.resize(size_t(vocab));
    std::iota(cand.begin(), cand.end(), 0);
  } else {
    cand.assign(allowed.begin(), allowed.end());
  }
  if (p.top_k > 0 && p.top_k < int64_t(cand.size())) {
    std::nth_element(cand.begin(), cand.begin() + (p.top_k - 1), cand.end(), cmp);
    cand.resize(size_t(p.top_k));
    std::sort(cand.begin(), cand.end(), cmp);
  } else if (p.top_k > 0 && p.top_k < vocab) {
    std::sort(cand.begin(), cand.end(), cmp);  // the top-k order (the -inf ids come last)
  }
  float top = l[cand[0]];
  for (int32_t c : cand) top = std::max(top, l[c]);
  const float inv_t = 1.0f / p.temperature;
  std::vector<float>& prob = scratch.prob;
  prob.resize(cand.size());
  for (size_t i = 0; i < cand.size(); ++i) prob[i] = std::exp((l[cand[i]] - top) * inv_t);
  if (p.min_p > 0.0f) {  // relative to the most likely token, whose weight is 1
    size_t n = 0;
    for (size_t i = 0; i < cand.size(); ++i)
      if (prob[i] >= p.min_p) {
        cand[n] = cand[i];
        prob[n++] = prob[i];
      }
    cand.resize(n);
    prob.resize(n);
  }
  double sum = 0;
  for (float v : prob) sum += v;
  size_t n = cand.size();
  if (p.top_p < 1.0f) {
    // The smallest prefix by descending probability whose mass reaches top_p.
    std::vector<size_t>& order = scratch.order;
    order.resize(cand.size());
    std::iota(order.begin(), order.end(), 0);
    auto by_prob = [&](size_t x, size_t y) { return cmp(cand[x], cand[y]); };
    const double want = double(p.top_p) * sum;
    size_t k = std::min<size_t>(256, order.size());
    for (;;) {
      std::partial_sort(order.begin(), order.begin() + k, order.end(), by_prob);
      double acc = 0;
      size_t keep = 0;
      // At least the most likely id: a top_p too small for a float is 0 (want 0).
      while (keep < k && (keep == 0 || acc < want)) acc += prob[order[keep++]];
      if (acc >= want || k == order.size()) {
        // The kept ids in descending order, gathered into the spare buffers.
        scratch.cand2.resize(keep);
        scratch.prob2.resize(keep);
        for (size_t i = 0; i < keep; ++i) {
          scratch.cand2[i] = cand[order[i]];
          scratch.prob2[i] = prob[order[i]];
        }
        cand.swap(scratch.cand2);
        prob.swap(scratch.prob2);
        break;
      }
      k = std::min(order.size(), k * 8);
    }
    n = cand.size();
    sum = 0;
    for (float v : prob) sum += v;
  }
  const double u = counter_uniform(p.seed, request, position) * sum;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += prob[i];
    if (u < acc) return cand[i];
  }
  return cand[n - 1];
}

}  // namespace fathom::engine
