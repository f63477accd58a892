// The fast sparse-attention kernel against its strict twin on random inputs, and the strict
// kernel against a direct softmax computed in long double (independent of the chunking).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/norm.h"
#include "model/attention.h"

namespace fathom::model {
namespace {

struct Problem {
  int64_t heads = 4, dim = 128, n = 0;
  std::vector<float> q, kv, sink;
  std::vector<const float*> entries;
};

Problem make(int64_t n, uint32_t seed) {
  Problem p;
  p.n = n;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  p.q.resize(size_t(p.heads * p.dim));
  p.kv.resize(size_t(n * p.dim));
  p.sink.resize(size_t(p.heads));
  for (auto& v : p.q) v = kernels::round_to_bf16(g(rng));
  for (auto& v : p.kv) v = kernels::round_to_bf16(g(rng));
  for (auto& v : p.sink) v = g(rng);
  for (int64_t i = 0; i < n; ++i)
    p.entries.push_back(i % 7 == 3 ? nullptr : &p.kv[size_t(i * p.dim)]);  // some empty slots
  return p;
}

TEST(SparseAttention, FastAgreesWithStrictWithinTwoBf16Steps) {
  for (int64_t n : {1, 16, 64, 65, 200}) {
    Problem p = make(n, uint32_t(n));
    const float scale = 1.0f / std::sqrt(float(p.dim));
    std::vector<float> strict(p.q.size()), fast(p.q.size());
    sparse_attention(p.q.data(), p.heads, p.dim, p.entries.data(), n, p.sink.data(), scale,
                     strict.data());
    sparse_attention_fast(p.q.data(), p.heads, p.dim, p.entries.data(), n, p.sink.data(), scale,
                          fast.data());
    for (size_t i = 0; i < strict.size(); ++i) {
      // Outputs are bf16 (8 significant bits); allow two steps of the larger magnitude.
      const float tol = 2 * std::ldexp(std::max(std::fabs(strict[i]), 1e-3f), -7);
      ASSERT_NEAR(fast[i], strict[i], tol) << "n=" << n << " i=" << i;
    }
  }
}

TEST(SparseAttention, StrictMatchesADirectSoftmaxWithSink) {
  // Independent truth: softmax over the valid scores plus the sink (which has no value),
  // in long double. The kernel's bf16 probabilities and output bound the difference.
  for (int64_t n : {5, 64, 130}) {
    Problem p = make(n, 100 + uint32_t(n));
    const float scale = 1.0f / std::sqrt(float(p.dim));
    std::vector<float> out(p.q.size());
    sparse_attention(p.q.data(), p.heads, p.dim, p.entries.data(), n, p.sink.data(), scale,
                     out.data());
    for (int64_t h = 0; h < p.heads; ++h) {
      std::vector<long double> s;
      long double m = p.sink[size_t(h)];
      for (int64_t j = 0; j < n; ++j) {
        long double d = 0;
        if (p.entries[size_t(j)])
          for (int64_t i = 0; i < p.dim; ++i)
            d += (long double)p.q[size_t(h * p.dim + i)] * p.entries[size_t(j)][i];
        s.push_back(p.entries[size_t(j)] ? d * scale : -INFINITY);
        m = std::max(m, s.back());
      }
      long double den = std::exp((long double)p.sink[size_t(h)] - m);
      for (auto v : s) den += std::exp(v - m);
      for (int64_t i = 0; i < p.dim; ++i) {
        long double o = 0;
        for (int64_t j = 0; j < n; ++j)
          if (p.entries[size_t(j)]) o += std::exp(s[size_t(j)] - m) * p.entries[size_t(j)][i];
        o /= den;
        ASSERT_NEAR(double(out[size_t(h * p.dim + i)]), double(o),
                    0.02 + 0.01 * std::fabs(double(o)))
            << "n=" << n << " h=" << h << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace fathom::model
