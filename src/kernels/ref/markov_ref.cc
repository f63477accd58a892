#include <cmath>
#include <cstring>

#include "kernels/markov.h"

namespace fathom::kernels::ref {

void markov_bias(const float* head, int64_t V, int64_t R, const float* embed, float* logits) {
  for (int64_t v = 0; v < V; ++v) {
    double acc = 0;
    const float* h = head + v * R;
    for (int64_t r = 0; r < R; ++r) acc += double(h[r]) * double(embed[r]);
    logits[v] = logits[v] + float(acc);
  }
}

int32_t markov_argmax(const float* head, int64_t V, int64_t R, const float* embed,
                      const float* logits, float* scratch) {
  std::memcpy(scratch, logits, size_t(V) * sizeof(float));
  markov_bias(head, V, R, embed, scratch);
  int32_t best = 0;
  for (int64_t v = 1; v < V; ++v)
    if (scratch[v] > scratch[best]) best = int32_t(v);
  return best;
}

}  // namespace fathom::kernels::ref

namespace fathom::kernels {

void markov_row_norms(const float* head, int64_t V, int64_t R, double* norms) {
  for (int64_t v = 0; v < V; ++v) {
    double sq = 0;
    for (int64_t r = 0; r < R; ++r) sq += double(head[v * R + r]) * double(head[v * R + r]);
    // Relative error of the sum and the root is below 1e-15; widen by far more.
    norms[v] = std::sqrt(sq) * (1.0 + 1e-9);
  }
}

}  // namespace fathom::kernels
