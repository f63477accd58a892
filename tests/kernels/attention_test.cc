// The AMX sparse attention row against the attention's definition in double precision, and
// the invariances the engine relies on: a row's bits depend only on its query and its entry
// list (empty slots, where the entries sit in memory and the thread do not matter).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/norm.h"
#include "kernels/quant.h"

namespace fathom::kernels {
namespace {

float bf16(float v) { return round_to_bf16(v); }

// out [h][d] = sum_e bf16(p_e) e_d / (sum_e p_e + exp(sink - max)), p_e = exp(s_e - max),
// s_e = q·e * scale, all in double; and the magnitude sum_e |bf16(p_e) e_d| / denominator.
void reference(const std::vector<float>& q, int64_t heads, int64_t dim,
               const std::vector<const float*>& entries, const std::vector<float>& sink,
               float scale, std::vector<double>* out, std::vector<double>* mag) {
  out->assign(size_t(heads * dim), 0.0);
  mag->assign(size_t(heads * dim), 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> s;
    for (const float* e : entries) {
      if (e == nullptr) continue;
      double dot = 0;
      for (int64_t i = 0; i < dim; ++i) dot += double(q[size_t(h * dim + i)]) * double(e[i]);
      s.push_back(dot * double(scale));
    }
    double mx = -1e30;
    for (double v : s) mx = std::max(mx, v);
    double denom = std::exp(double(sink[size_t(h)]) - mx);
    for (double v : s) denom += std::exp(v - mx);
    size_t k = 0;
    for (const float* e : entries) {
      if (e == nullptr) continue;
      const double p = bf16(float(std::exp(s[k++] - mx)));
      for (int64_t i = 0; i < dim; ++i) {
        (*out)[size_t(h * dim + i)] += p * double(e[i]) / denom;
        (*mag)[size_t(h * dim + i)] += std::fabs(p * double(e[i])) / denom;
      }
    }
  }
}

TEST(SparseAttentionAmx, MatchesTheDefinitionAndDependsOnlyOnTheList) {
  if (!cpu_path_available(CpuPath::kAmx)) {
    std::printf("the AMX attention: untested (%s)\n", cpu_path_missing(CpuPath::kAmx).c_str());
    GTEST_SKIP();
  }
  std::mt19937 rng(41);
  std::normal_distribution<float> g(0.0f, 1.0f);
  struct Shape {
    int64_t heads, dim, entries;
  };
  for (Shape sh : {Shape{16, 512, 640}, Shape{8, 128, 37}, Shape{64, 512, 130}, Shape{3, 64, 1},
                   Shape{16, 96, 0}, Shape{20, 256, 300}}) {
    ASSERT_TRUE(cpu::sparse_attention_amx_supported(sh.heads, sh.dim));
    // Operands as the model has them: the query in bf16, the entries E4M3-fake-quantised.
    std::vector<float> q(size_t(sh.heads * sh.dim)), sink(size_t(sh.heads));
    for (auto& v : q) v = bf16(g(rng) * 0.3f);
    for (auto& v : sink) v = g(rng);
    std::vector<std::vector<float>> rows(size_t(sh.entries), std::vector<float>(size_t(sh.dim)));
    for (auto& r : rows) {
      for (auto& v : r) v = g(rng) * 2.0f;
      cpu::fake_quant_e4m3(r.data(), sh.dim, r.data());
    }
    std::vector<const float*> list;
    for (auto& r : rows) list.push_back(r.data());
    const float scale = 1.0f / std::sqrt(float(sh.dim));
    std::vector<float> got(size_t(sh.heads * sh.dim));
    cpu::sparse_attention_amx(q.data(), sh.heads, sh.dim, list.data(), int64_t(list.size()),
                              sink.data(), scale, got.data());
    std::vector<double> want, mag;
    reference(q, sh.heads, sh.dim, list, sink, scale, &want, &mag);
    for (size_t i = 0; i < got.size(); ++i) {
      // A probability may round to the neighbouring bf16 value (2^-8 of it), the output is
      // rounded to bf16 (2^-9 of it).
      const double bound = std::ldexp(mag[i], -7) + std::ldexp(std::fabs(want[i]), -8) + 1e-30;
      ASSERT_LE(std::fabs(double(got[i]) - want[i]), bound)
          << "heads " << sh.heads << " dim " << sh.dim << " entries " << sh.entries << " at " << i;
    }
    // Empty slots anywhere and the entries copied elsewhere: the same bits; on another thread
    // too.
    std::vector<std::vector<float>> copies(rows);
    std::vector<const float*> holes;
    for (size_t i = 0; i < copies.size(); ++i) {
      if (rng() % 3 == 0) holes.push_back(nullptr);
      holes.push_back(copies[i].data());
    }
    holes.push_back(nullptr);
    std::vector<float> again(got.size());
    std::thread([&] {
      cpu::sparse_attention_amx(q.data(), sh.heads, sh.dim, holes.data(), int64_t(holes.size()),
                                sink.data(), scale, again.data());
    }).join();
    EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * 4), 0)
        << "heads " << sh.heads << " dim " << sh.dim;
  }
}

}  // namespace
}  // namespace fathom::kernels
