// Scalar reference kernels: exact decode, double accumulation, one rounding at the end.
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "kernels/quant.h"

namespace fathom::kernels {

const float* e4m3_table() {
  static const auto* t = [] {
    auto* v = new float[256];
    for (int b = 0; b < 256; ++b) v[b] = e4m3_to_float(uint8_t(b));
    return v;
  }();
  return t;
}

uint8_t e4m3_code(float v) {
  const float* table = e4m3_table();
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const float a = std::fabs(v);
  // Codes 0..126 are the non-negative finite values in increasing order.
  int lo = 0, hi = 126;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (table[mid] < a)
      lo = mid + 1;
    else
      hi = mid;
  }
  return uint8_t(sign | lo);
}

namespace ref {
namespace {
float round_once(double v, OutRounding out) {
  return out == OutRounding::kBF16 ? round_double_to_bf16(v) : float(v);
}
}  // namespace

void matmul_fp8(const Fp8Matrix& w, const float* x, int64_t batch, float* y, OutRounding out) {
  const int64_t kb = (w.cols + 31) / 32;
  const float* table = e4m3_table();
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t m = 0; m < w.rows; ++m) {
      const uint8_t* wr = w.weight + m * w.cols;
      const uint8_t* sr = w.scale + (m / 32) * kb;
      const float* xr = x + n * w.cols;
      double acc = 0;
      for (int64_t k = 0; k < w.cols; ++k)
        acc += double(e8m0_to_float(sr[k / 32])) * double(table[wr[k]]) * double(xr[k]);
      y[n * w.rows + m] = round_once(acc, out);
    }
  }
}

void matmul_fp4(const Fp4Matrix& w, const float* x, int64_t batch, float* y, OutRounding out) {
  const int64_t kb = w.cols / 32;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t m = 0; m < w.rows; ++m) {
      double acc = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        uint8_t byte = w.weight[m * (w.cols / 2) + k / 2];
        uint8_t code = (k & 1) ? (byte >> 4) : (byte & 0xF);
        double s = e8m0_to_float(w.scale[m * kb + k / 32]);
        acc += s * double(e2m1_to_float(code)) * double(x[n * w.cols + k]);
      }
      y[n * w.rows + m] = round_once(acc, out);
    }
  }
}

void matmul_bf16(const Bf16Matrix& w, const float* x, int64_t batch, float* y) {
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t m = 0; m < w.rows; ++m) {
      double acc = 0;
      for (int64_t k = 0; k < w.cols; ++k)
        acc += double(bf16_to_float(w.weight[m * w.cols + k])) * double(x[n * w.cols + k]);
      y[n * w.rows + m] = float(acc);
    }
  }
}

}  // namespace ref
}  // namespace fathom::kernels
