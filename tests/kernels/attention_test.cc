// The AMX and AVX-512 BF16 sparse attention rows against the attention's definition in double
// precision, and the invariances the engine relies on: a row's bits depend only on its query
// and its entry list (empty slots, where the entries sit in memory and the thread do not
// matter).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/norm.h"
#include "kernels/quant.h"

namespace fathom::kernels {
namespace {

float bf16(float v) { return round_to_bf16(v); }

// Index queries and keys as the model has them: E2M1 values times a power-of-two scale per 32.
void fake_quant_e2m1_like(std::vector<float>* v) {
  ref::fake_quant_e2m1(v->data(), int64_t(v->size()), 32, false, v->data());
}

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

using AttentionRow = void (*)(const float*, int64_t, int64_t, const float* const*, int64_t,
                              const float*, float, float*);

// The row on `path` against the definition; a list with empty slots and entries elsewhere
// gives the same bits, on another thread too; and, when `split_heads`, each half of the
// heads run alone gives its heads' bits.
void expect_attention_row(CpuPath path, AttentionRow attention_row, bool split_heads) {
  if (!cpu_path_available(path)) {
    std::printf("the %s attention: untested (%s)\n", cpu_path_name(path),
                cpu_path_missing(path).c_str());
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
    attention_row(q.data(), sh.heads, sh.dim, list.data(), int64_t(list.size()), sink.data(), scale,
                  got.data());
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
      attention_row(q.data(), sh.heads, sh.dim, holes.data(), int64_t(holes.size()), sink.data(),
                    scale, again.data());
    }).join();
    EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * 4), 0)
        << "heads " << sh.heads << " dim " << sh.dim;
    if (!split_heads || sh.heads < 2) continue;
    // As the model's decode runs it: the heads in two halves.
    const int64_t half = sh.heads / 2;
    std::vector<float> halves(got.size());
    attention_row(q.data(), half, sh.dim, list.data(), int64_t(list.size()), sink.data(), scale,
                  halves.data());
    attention_row(q.data() + half * sh.dim, sh.heads - half, sh.dim, list.data(),
                  int64_t(list.size()), sink.data() + half, scale, halves.data() + half * sh.dim);
    EXPECT_EQ(std::memcmp(halves.data(), got.data(), got.size() * 4), 0)
        << "heads " << sh.heads << " dim " << sh.dim;
  }
}

TEST(SparseAttentionAmx, MatchesTheDefinitionAndDependsOnlyOnTheList) {
  expect_attention_row(CpuPath::kAmx, cpu::sparse_attention_amx, false);
}

TEST(SparseAttentionAvx512Bf16, MatchesTheDefinitionAndDependsOnlyOnTheListAndItsHeads) {
  expect_attention_row(CpuPath::kAvx512Bf16, cpu::sparse_attention_avx512bf16, true);
}

// The row over bf16 copies of the entries (as a prompt chunk runs it) gives the bits of the
// row over the float entries, also for entries that are not bf16 values (rounded ties to
// even, as round_to_bf16, the scalar twin, rounds them), with empty slots anywhere.
TEST(SparseAttentionAvx512Bf16, OnBf16EntriesGivesTheBitsOfTheFloatEntries) {
  if (!cpu_path_available(CpuPath::kAvx512Bf16)) {
    std::printf("the AVX-512 BF16 attention on bf16 entries: untested (%s)\n",
                cpu_path_missing(CpuPath::kAvx512Bf16).c_str());
    GTEST_SKIP();
  }
  std::mt19937 rng(47);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto [heads, dim, n] : {std::tuple<int64_t, int64_t, int64_t>{16, 512, 640},
                               {8, 128, 37},
                               {20, 256, 301},
                               {3, 64, 1},
                               {16, 96, 0}}) {
    std::vector<float> q(size_t(heads * dim)), sink(static_cast<size_t>(heads));
    for (auto& v : q) v = bf16(g(rng) * 0.3f);
    for (auto& v : sink) v = g(rng);
    // Half the rows E4M3 values (exact in bf16, as the model's), half arbitrary floats.
    std::vector<float> rows(size_t(n * dim));
    for (auto& v : rows) v = g(rng) * 2.0f;
    for (int64_t e = 0; e < n; e += 2)
      cpu::fake_quant_e4m3(&rows[size_t(e * dim)], dim, &rows[size_t(e * dim)]);
    std::vector<uint16_t> b(rows.size());
    cpu::entries_to_bf16(rows.data(), n, dim, b.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      uint32_t bits = 0;
      const float r = round_to_bf16(rows[i]);
      std::memcpy(&bits, &r, 4);
      ASSERT_EQ(b[i], bits >> 16) << "value " << rows[i];
    }
    std::vector<const float*> fl;
    std::vector<const uint16_t*> bl;
    for (int64_t e = 0; e < n; ++e) {
      if (rng() % 4 == 0) {
        fl.push_back(nullptr);
        bl.push_back(nullptr);
      }
      fl.push_back(&rows[size_t(e * dim)]);
      bl.push_back(&b[size_t(e * dim)]);
    }
    const float scale = 1.0f / std::sqrt(float(dim));
    std::vector<float> want(size_t(heads * dim)), got(want.size());
    cpu::sparse_attention_avx512bf16(q.data(), heads, dim, fl.data(), int64_t(fl.size()),
                                     sink.data(), scale, want.data());
    cpu::sparse_attention_avx512bf16_on_bf16(q.data(), heads, dim, bl.data(), int64_t(bl.size()),
                                             sink.data(), scale, got.data());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * 4), 0)
        << "heads " << heads << " dim " << dim << " entries " << n;
  }
}

// The indexer's scores: each key's against the definition in double (the dots may land on
// the neighbouring bf16 value, so a head's term may move by a bf16 step of it), and a key's
// score the same bits whether it is scored among 300 keys or among the first 17.
TEST(IndexScoresAmx, MatchTheDefinitionAndDependOnlyOnTheKey) {
  if (!cpu_path_available(CpuPath::kAmx)) {
    std::printf("the AMX indexer scores: untested (%s)\n", cpu_path_missing(CpuPath::kAmx).c_str());
    GTEST_SKIP();
  }
  std::mt19937 rng(43);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto [heads, dim, n] : {std::tuple<int64_t, int64_t, int64_t>{16, 128, 300},
                               {32, 128, 45},
                               {16, 64, 17},
                               {5, 32, 1}}) {
    std::vector<float> q(static_cast<size_t>(heads * dim)), w(static_cast<size_t>(heads)),
        keys(static_cast<size_t>(n * dim));
    for (auto& v : q) v = g(rng);
    fake_quant_e2m1_like(&q);
    for (auto& v : keys) v = g(rng);
    fake_quant_e2m1_like(&keys);
    for (auto& v : w) v = bf16(g(rng) * 0.1f);
    const int64_t n16 = (n + 15) / 16 * 16;
    std::vector<uint16_t> kb(static_cast<size_t>(n16 * dim), 0);
    cpu::keys_to_bf16(keys.data(), n, dim, dim, kb.data());
    std::vector<float> got(static_cast<size_t>(n)), sub(static_cast<size_t>(n));
    cpu::index_scores_amx(q.data(), w.data(), heads, dim, kb.data(), n, got.data());
    for (int64_t j = 0; j < n; ++j) {
      double total = 0, mag = 0;
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t i = 0; i < dim; ++i)
          dot += double(q[size_t(h * dim + i)]) * double(keys[size_t(j * dim + i)]);
        const double term = std::max(0.0, dot) * double(w[size_t(h)]);
        total += term;
        mag += std::fabs(term);
      }
      ASSERT_LE(std::fabs(double(got[size_t(j)]) - total), std::ldexp(mag, -6) + 1e-30)
          << "heads " << heads << " dim " << dim << " key " << j;
    }
    const int64_t m = std::min<int64_t>(n, 17), m16 = (m + 15) / 16 * 16;
    std::vector<uint16_t> kb2(static_cast<size_t>(m16 * dim), 0);
    std::copy_n(kb.begin(), m * dim, kb2.begin());
    cpu::index_scores_amx(q.data(), w.data(), heads, dim, kb2.data(), m, sub.data());
    EXPECT_EQ(std::memcmp(sub.data(), got.data(), size_t(m) * 4), 0) << "heads " << heads;
  }
}

}  // namespace
}  // namespace fathom::kernels
