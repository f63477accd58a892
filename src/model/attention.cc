#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/dot.h"
#include "kernels/norm.h"

namespace fathom::model {

void sparse_attention(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                      int64_t n_entries, const float* sink, float scale, float* out) {
  constexpr int64_t kChunk = 64;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float acc[1024];
  float s[kChunk];
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * dim;
    float running_max = -1e30f, denom = 0.0f;
    std::fill(acc, acc + dim, 0.0f);
    for (int64_t c0 = 0; c0 < n_entries; c0 += kChunk) {
      const int64_t n = std::min(kChunk, n_entries - c0);
      float chunk_max = neg_inf;
      for (int64_t j = 0; j < n; ++j) {
        const float* kv = entries[c0 + j];
        if (kv == nullptr) {
          s[j] = neg_inf;
          continue;
        }
        double dot = 0;
        for (int64_t i = 0; i < dim; ++i) dot += double(qh[i]) * double(kv[i]);
        s[j] = float(dot) * scale;
        chunk_max = std::max(chunk_max, s[j]);
      }
      const float prev = running_max;
      running_max = std::max(prev, chunk_max);
      const float rescale = float(std::exp(double(prev - running_max)));
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = float(std::exp(double(s[j] - running_max)));
        sum += double(s[j]);
      }
      denom = denom * rescale + float(sum);
      for (int64_t i = 0; i < dim; ++i) {
        double pv = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float* kv = entries[c0 + j];
          if (kv != nullptr) pv += double(kernels::round_to_bf16(s[j])) * double(kv[i]);
        }
        acc[i] = acc[i] * rescale + float(pv);
      }
    }
    denom = denom + float(std::exp(double(sink[h] - running_max)));
    for (int64_t i = 0; i < dim; ++i) out[h * dim + i] = kernels::round_to_bf16(acc[i] / denom);
  }
}

void sparse_attention_fast(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                           int64_t n_entries, const float* sink, float scale, float* out) {
  constexpr int64_t kChunk = 64;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float acc[1024];
  float s[kChunk];
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * dim;
    float running_max = -1e30f, denom = 0.0f;
    std::fill(acc, acc + dim, 0.0f);
    for (int64_t c0 = 0; c0 < n_entries; c0 += kChunk) {
      const int64_t n = std::min(kChunk, n_entries - c0);
      float chunk_max = neg_inf;
      for (int64_t j = 0; j < n; ++j) {
        const float* kv = entries[c0 + j];
        if (kv == nullptr) {
          s[j] = neg_inf;
          continue;
        }
        s[j] = kernels::dot_f32_lanes(qh, kv, dim) * scale;
        chunk_max = std::max(chunk_max, s[j]);
      }
      const float prev = running_max;
      running_max = std::max(prev, chunk_max);
      const float rescale = std::exp(prev - running_max);
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - running_max);
        sum += s[j];
      }
      denom = denom * rescale + sum;
      for (int64_t i = 0; i < dim; ++i) acc[i] *= rescale;
      for (int64_t j = 0; j < n; ++j) {
        const float* kv = entries[c0 + j];
        if (kv == nullptr) continue;
        const float p = kernels::round_to_bf16(s[j]);
        for (int64_t i = 0; i < dim; ++i) acc[i] += p * kv[i];
      }
    }
    denom += std::exp(sink[h] - running_max);
    for (int64_t i = 0; i < dim; ++i) out[h * dim + i] = kernels::round_to_bf16(acc[i] / denom);
  }
}

void attend(bool fast, const float* q, int64_t heads, int64_t dim, const float* const* entries,
            int64_t n_entries, const float* sink, float scale, float* out) {
  if (!fast) return sparse_attention(q, heads, dim, entries, n_entries, sink, scale, out);
  if (kernels::cpu_path() == kernels::CpuPath::kAmx &&
      kernels::cpu::sparse_attention_amx_supported(heads, dim))
    return kernels::cpu::sparse_attention_amx(q, heads, dim, entries, n_entries, sink, scale, out);
  if (kernels::cpu_path() == kernels::CpuPath::kAvx512Bf16 &&
      kernels::cpu::sparse_attention_amx_supported(heads, dim))
    return kernels::cpu::sparse_attention_avx512bf16(q, heads, dim, entries, n_entries, sink, scale,
                                                     out);
  sparse_attention_fast(q, heads, dim, entries, n_entries, sink, scale, out);
}

}  // namespace fathom::model
