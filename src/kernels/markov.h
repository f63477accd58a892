// The DSpark Markov head's bias (shared/spec/model-v41.md §6.9): logits[v] += float(Σ_r
// double(head[v, r]) · double(embed[r])), the sum in double in the order of r, as DeepSeek's
// reference computes it. ref:: is that loop; cpu:: computes sixteen v at a time in AVX2
// double lanes (the baseline) with fused multiply-adds — the same bits, since the product of
// two floats is exact in double, so rounding the sum once is what the reference rounds. Pure
// functions; any thread.
//
// markov_argmax gives the draft id alone — argmax_v (logits[v] + bias[v]) with each sum
// exactly as markov_bias rounds it, ties to the lower id — without the vocabulary-wide bias
// when it can: cpu:: bounds each bias by |head[v]|·|embed| (Cauchy–Schwarz, widened past every
// rounding), takes the best exact value of two likely rows and then computes exactly only the
// rows whose bound reaches it. Rows it skips cannot reach the best, so the id is the
// reference's; non-finite inputs take the full computation.
#pragma once

#include <cstdint>

namespace fathom::kernels {
namespace ref {
// head [V, R] row-major; embed [R]; logits [V] (added to).
void markov_bias(const float* head, int64_t V, int64_t R, const float* embed, float* logits);
// The full bias into a copy of logits, then the first maximum. `scratch` holds V floats.
int32_t markov_argmax(const float* head, int64_t V, int64_t R, const float* embed,
                      const float* logits, float* scratch);
}  // namespace ref
// norms[v] >= the Euclidean norm of head row v (computed once per model, for markov_argmax).
void markov_row_norms(const float* head, int64_t V, int64_t R, double* norms);
namespace cpu {
void markov_bias(const float* head, int64_t V, int64_t R, const float* embed, float* logits);
// ref::markov_argmax's id; `norms` from markov_row_norms. *exact_rows (optional) counts the
// rows whose bias it computed. Allocates nothing.
int32_t markov_argmax(const float* head, const double* norms, int64_t V, int64_t R,
                      const float* embed, const float* logits, int64_t* exact_rows = nullptr);
}  // namespace cpu
}  // namespace fathom::kernels
