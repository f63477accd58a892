#include "model/mhc.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/norm.h"

namespace fathom::model {
namespace {

constexpr int kMixRows = kHcStreams * (2 + kHcStreams);  // 4 pre + 4 post + 16 comb = 24

float sigmoid(float z) { return float(1.0 / (1.0 + std::exp(-double(z)))); }

// The reference divides each row (axis 1) or column (axis 0) by its sum plus eps; the sum is
// accumulated in double and rounded to fp32, then eps is added in fp32.
void normalise(float (&c)[kHcStreams][kHcStreams], bool rows, float eps) {
  for (int a = 0; a < kHcStreams; ++a) {
    double s = 0;
    for (int b = 0; b < kHcStreams; ++b) s += rows ? c[a][b] : c[b][a];
    const float d = float(s) + eps;
    for (int b = 0; b < kHcStreams; ++b) (rows ? c[a][b] : c[b][a]) /= d;
  }
}

// The pre/post gates and the Sinkhorn-normalised comb from the 24 normed mixes.
HcMix split_mix(const float* m, const HcMixParams& p);

}  // namespace

HcMix hc_mix(const float* streams, const HcMixParams& p) {
  const int64_t n = kHcStreams * p.hidden;
  // rsqrt(mean(v^2) + eps): fp32 squares, double mean rounded once, rsqrt in double.
  double sumsq = 0;
  for (int64_t i = 0; i < n; ++i) sumsq += streams[i] * streams[i];
  const float var = float(sumsq / double(n));
  const float r = float(1.0 / std::sqrt(double(var + p.norm_eps)));
  float m[kMixRows];
  for (int o = 0; o < kMixRows; ++o) {
    const float* w = p.fn + o * n;
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += double(w[i]) * double(streams[i]);
    m[o] = float(acc) * r;
  }
  return split_mix(m, p);
}

HcMix hc_mix_fast(const float* streams, const HcMixParams& p, ThreadPool* pool) {
  const int64_t n = kHcStreams * p.hidden;
  double d[kMixRows + 1];
  // 25 dot products over 4 * hidden values: the norm and the 24 mixing rows.
  auto rows = [&](size_t part) {
    for (int o = int(part); o <= kMixRows; o += pool ? int(pool->size()) : 1)
      d[o] = kernels::dot_f64_lanes(o == kMixRows ? streams : p.fn + o * n, streams, n);
  };
  if (pool != nullptr && pool->size() > 1)
    pool->parallel_for(pool->size(), rows);
  else
    rows(0);
  const float var = float(d[kMixRows] / double(n));
  const float r = float(1.0 / std::sqrt(double(var + p.norm_eps)));
  float m[kMixRows];
  for (int o = 0; o < kMixRows; ++o) m[o] = float(d[o]) * r;
  return split_mix(m, p);
}

void hc_mix_fast_rows(const float* streams, int64_t rows, const HcMixParams& p, HcMix* out) {
  const int64_t n = kHcStreams * p.hidden;
  constexpr int64_t kGroup = 8;
  double d[kGroup][kMixRows + 1];
  for (int64_t t0 = 0; t0 < rows; t0 += kGroup) {
    const int64_t nb = std::min(kGroup, rows - t0);
    kernels::cpu::dots_f64_lanes(streams + t0 * n, nb, n, p.fn, kMixRows, &d[0][0]);
    for (int64_t b = 0; b < nb; ++b) {
      const float var = float(d[b][kMixRows] / double(n));
      const float r = float(1.0 / std::sqrt(double(var + p.norm_eps)));
      float m[kMixRows];
      for (int o = 0; o < kMixRows; ++o) m[o] = float(d[b][o]) * r;
      out[t0 + b] = split_mix(m, p);
    }
  }
}

namespace {

HcMix split_mix(const float* m, const HcMixParams& p) {
  HcMix mix;
  for (int j = 0; j < kHcStreams; ++j) {
    mix.pre[j] = sigmoid(m[j] * p.scale[0] + p.base[j]) + p.sinkhorn_eps;
    mix.post[j] = 2.0f * sigmoid(m[kHcStreams + j] * p.scale[1] + p.base[kHcStreams + j]);
  }
  float(&c)[kHcStreams][kHcStreams] = mix.comb;
  for (int i = 0; i < kHcStreams; ++i) {
    // Row softmax as the kernel spells it: fp32 max and difference, exp in double rounded to
    // fp32, the sum accumulated in double and rounded, an fp32 division, then + eps.
    float logits[kHcStreams];
    for (int j = 0; j < kHcStreams; ++j) {
      const int o = 2 * kHcStreams + i * kHcStreams + j;
      logits[j] = m[o] * p.scale[2] + p.base[o];
    }
    const float mx = *std::max_element(logits, logits + kHcStreams);
    float e[kHcStreams];
    double s = 0;
    for (int j = 0; j < kHcStreams; ++j) {
      e[j] = float(std::exp(double(logits[j] - mx)));
      s += e[j];
    }
    const float sum = float(s);
    for (int j = 0; j < kHcStreams; ++j) c[i][j] = e[j] / sum + p.sinkhorn_eps;
  }
  normalise(c, /*rows=*/false, p.sinkhorn_eps);
  for (int it = 1; it < p.sinkhorn_iters; ++it) {
    normalise(c, /*rows=*/true, p.sinkhorn_eps);
    normalise(c, /*rows=*/false, p.sinkhorn_eps);
  }
  return mix;
}

}  // namespace

void hc_pre(const float* pre, const float* streams, int64_t hidden, float* x) {
  for (int64_t k = 0; k < hidden; ++k) {
    double s = 0;
    for (int j = 0; j < kHcStreams; ++j) s += pre[j] * streams[j * hidden + k];
    x[k] = kernels::round_to_bf16(float(s));
  }
}

void hc_post(const HcMix& mix, const float* sublayer_out, const float* streams, int64_t hidden,
             float* out) {
  // As the reference's broadcast ops: fp32 products comb[i][j] * X[i] and post[j] * y, the sum
  // over i accumulated in double and rounded to fp32, an fp32 add, then bf16.
  for (int j = 0; j < kHcStreams; ++j) {
    for (int64_t k = 0; k < hidden; ++k) {
      double s = 0;
      for (int i = 0; i < kHcStreams; ++i) s += mix.comb[i][j] * streams[i * hidden + k];
      out[j * hidden + k] = kernels::round_to_bf16(mix.post[j] * sublayer_out[k] + float(s));
    }
  }
}

}  // namespace fathom::model
