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

}  // namespace fathom::kernels::ref
