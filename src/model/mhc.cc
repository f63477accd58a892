#include "model/mhc.h"

#include <algorithm>
#include <cmath>
#include <vector>

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
  thread_local std::vector<double> xd;
  for (int64_t t0 = 0; t0 < rows; t0 += 4) {
    const int64_t nb = std::min<int64_t>(4, rows - t0);
    // Four rows' streams in double (rows past the batch repeat the last one).
    xd.resize(size_t(4 * n));
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t i = 0; i < n; ++i)
        xd[size_t(b * n + i)] = double(streams[(t0 + std::min(b, nb - 1)) * n + i]);
    const double *x0 = xd.data(), *x1 = x0 + n, *x2 = x1 + n, *x3 = x2 + n;
    // dot_f64_lanes' arithmetic: eight lane sums (element i in lane i % 8; the products are
    // exact in double, so a fused multiply-add rounds as a product and a sum do), combined
    // pairwise at the end.
    auto combine = [](const double* l) {
      return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    };
    double d[4][kMixRows + 1];
    for (int o = 0; o <= kMixRows; ++o) {
      double a0[8] = {}, a1[8] = {}, a2[8] = {}, a3[8] = {};
      const int64_t full = n / 8 * 8;
      if (o < kMixRows) {
        const float* w = p.fn + o * n;
        for (int64_t i = 0; i < full; i += 8)
          for (int l = 0; l < 8; ++l) {
            const double wl = double(w[i + l]);
            a0[l] = __builtin_fma(wl, x0[i + l], a0[l]);
            a1[l] = __builtin_fma(wl, x1[i + l], a1[l]);
            a2[l] = __builtin_fma(wl, x2[i + l], a2[l]);
            a3[l] = __builtin_fma(wl, x3[i + l], a3[l]);
          }
        for (int64_t i = full; i < n; ++i) {
          const double wl = double(w[i]);
          a0[0] += wl * x0[i], a1[0] += wl * x1[i], a2[0] += wl * x2[i], a3[0] += wl * x3[i];
        }
      } else {
        for (int64_t i = 0; i < full; i += 8)
          for (int l = 0; l < 8; ++l) {
            a0[l] = __builtin_fma(x0[i + l], x0[i + l], a0[l]);
            a1[l] = __builtin_fma(x1[i + l], x1[i + l], a1[l]);
            a2[l] = __builtin_fma(x2[i + l], x2[i + l], a2[l]);
            a3[l] = __builtin_fma(x3[i + l], x3[i + l], a3[l]);
          }
        for (int64_t i = full; i < n; ++i)
          a0[0] += x0[i] * x0[i], a1[0] += x1[i] * x1[i], a2[0] += x2[i] * x2[i],
              a3[0] += x3[i] * x3[i];
      }
      d[0][o] = combine(a0), d[1][o] = combine(a1), d[2][o] = combine(a2), d[3][o] = combine(a3);
    }
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
