// The AVX-512 row kernels (gemv_avx512.cc), called by dispatch.cc. Private to kernels/cpu.
//
// gemv_avx512.cc is compiled with -mavx512*: it must not define or instantiate anything the
// linker could share with baseline files (inline functions and templates of headers, std
// containers), or an AVX2-only machine could end up running AVX-512 code. So it includes
// only this header and avx512_common.h (static helpers, a copy in each object) and holds row
// kernels over raw pointers; threading and scratch buffers live in dispatch.cc.
#pragma once

#include <cstdint>

#include "kernels/gemv.h"

namespace fathom::kernels::cpu {

// AVX-512 F/BW/VL. Every output row is one fixed sequence of operations, whatever the batch:
// columns in chunks of 32 (the last one masked), two 16-lane fp32 accumulators (the chunk's
// first and second halves), FMAs in column order, and one fixed horizontal sum. Weights are
// decoded in registers; a batch is walked eight activation rows at a time, each decoded
// chunk multiplied with all eight, so every row equals the GEMV's (batch 1) bit for bit.
namespace avx512 {
// Floats of scratch fp8_rows needs: x scaled for eight activation rows.
inline int64_t fp8_scratch_floats(int64_t cols) { return 8 * ((cols + 31) / 32 * 32); }
// Rows [r0, r1) of y [batch, W.rows] = x [batch, K] W^T. REQUIRES: scratch holds
// fp8_scratch_floats(K) floats (private to the caller's thread).
void fp8_rows(const Fp8Matrix& w, const float* x, int64_t batch, float* y, int64_t r0, int64_t r1,
              float* scratch);
void bf16_rows(const Bf16Matrix& w, const float* x, int64_t batch, float* y, int64_t r0,
               int64_t r1);
// FP4 multiplies x in even/odd order per 32-column block (xp [batch, K], from fp4_even_odd,
// shared by every thread).
void fp4_even_odd(const float* x, int64_t batch, int64_t cols, float* xp);
void fp4_rows(const Fp4Matrix& w, const float* xp, int64_t batch, float* y, int64_t r0, int64_t r1);
}  // namespace avx512

}  // namespace fathom::kernels::cpu
