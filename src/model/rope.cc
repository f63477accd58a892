#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "kernels/norm.h"

namespace fathom::model {

Rope::Rope(const RopeParams& p) {
  const int64_t half = p.dim / 2;
  freqs_.resize(size_t(half));
  const float fdim = float(p.dim);
  for (int64_t i = 0; i < half; ++i) {
    const float e = float(2 * i) / fdim;
    freqs_[size_t(i)] = 1.0f / float(std::pow(p.base, double(e)));
  }
  if (p.original_len > 0) {
    // YaRN: the correction range in double as the reference computes it in Python, the
    // ramp and the blend in fp32.
    auto correction = [&](double rotations) {
      return double(p.dim) * std::log(double(p.original_len) / (rotations * 2 * M_PI)) /
             (2 * std::log(p.base));
    };
    double low = std::max(std::floor(correction(p.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction(p.beta_slow)), double(p.dim - 1));
    if (low == high) high += 0.001;
    const float flow = float(low), range = float(high - low), factor = float(p.factor);
    for (int64_t i = 0; i < half; ++i) {
      float ramp = std::clamp((float(i) - flow) / range, 0.0f, 1.0f);
      float smooth = 1.0f - ramp;
      float f = freqs_[size_t(i)];
      freqs_[size_t(i)] = f / factor * (1.0f - smooth) + f * smooth;
    }
  }
}

void Rope::cos_sin(int64_t pos, float* cos, float* sin) const {
  const float t = float(pos);
  for (size_t i = 0; i < freqs_.size(); ++i) {
    const double angle = double(t * freqs_[i]);
    cos[i] = float(std::cos(angle));
    sin[i] = float(std::sin(angle));
  }
}

void Rope::rotate(float* x, int64_t pos, bool inverse) const {
  rotate_heads(x, 1, 0, pos, inverse);
}

void Rope::rotate_heads(float* x, int64_t heads, int64_t stride, int64_t pos, bool inverse) const {
  const size_t half = freqs_.size();
  float c[256], s[256];
  cos_sin(pos, c, s);
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * stride;
    for (size_t i = 0; i < half; ++i) {
      const double a = v[2 * i], b = v[2 * i + 1];
      const double cc = c[i], ss = inverse ? -double(s[i]) : double(s[i]);
      const float re = float(a * cc - b * ss), im = float(a * ss + b * cc);
      v[2 * i] = kernels::round_to_bf16(re);
      v[2 * i + 1] = kernels::round_to_bf16(im);
    }
  }
}

}  // namespace fathom::model
