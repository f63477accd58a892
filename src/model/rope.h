// Rotary position embedding as V4.1 applies it (shared/spec/model-v41.md §6.7): interleaved
// pairs (x[2i], x[2i+1]) of the last `dim` channels rotated by position·freq_i, with YaRN
// frequency blending on the compressed layers. Strict arithmetic of the golden data: the
// frequencies in fp32 (`base ** x` evaluated in double), cos/sin in double rounded to fp32,
// the complex product in double rounded to fp32 and then to bf16. Immutable after
// construction; any thread.
#pragma once

#include <cstdint>
#include <vector>

namespace fathom::model {

struct RopeParams {
  int64_t dim = 0;  // rotated channels (even)
  double base = 10000;
  double factor = 1;         // YaRN factor; used when original_len > 0
  int64_t original_len = 0;  // 0 = no YaRN
  double beta_fast = 32, beta_slow = 1;
};

class Rope {
 public:
  explicit Rope(const RopeParams& p);
  int64_t dim() const { return int64_t(freqs_.size()) * 2; }
  // cos and sin of position `pos` for each of the dim/2 pairs.
  void cos_sin(int64_t pos, float* cos, float* sin) const;
  // Rotates the pairs of x [dim] (bf16 values held as fp32) in place by `pos`, or by -pos
  // (the conjugate) when `inverse`; the result is rounded to bf16.
  void rotate(float* x, int64_t pos, bool inverse = false) const;
  // rotate() of `heads` vectors x, x + stride, ... at one position (cos and sin computed once).
  void rotate_heads(float* x, int64_t heads, int64_t stride, int64_t pos,
                    bool inverse = false) const;

 private:
  std::vector<float> freqs_;
};

}  // namespace fathom::model
