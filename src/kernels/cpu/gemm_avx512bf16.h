// The AVX-512 BF16 row kernels (gemm_avx512bf16.cc), called by dispatch.cc. Private to
// kernels/cpu.
//
// gemm_avx512bf16.cc is compiled with -mavx512bf16: like gemv_avx512.cc it must not define or
// instantiate anything the linker could share with baseline files, so it includes only this
// header and holds kernels over raw pointers; threading and scratch live in dispatch.cc.
#pragma once

#include <cstdint>

#include "kernels/gemv.h"

namespace fathom::kernels::cpu {

// VDPBF16PS for every batch size, the decode GEMV included (for CPUs with AVX-512 BF16 but
// no AMX tiles, such as AMD Zen 4: the dot product retires as many instructions per cycle as
// an fp32 FMA and does twice the work). The activations are rounded to bf16 (ties to even)
// once per call, 32 columns to a chunk, zero beyond K; each weight chunk is decoded to 32 bf16
// values exactly (an FP8 or FP4 value times its power-of-two scale is one bf16 value; BF16
// weights are taken as they are). Output (n, m) is one 16-lane fp32 accumulator, updated by
// one VDPBF16PS per chunk in ascending order (lane i takes the chunk's columns 2i and 2i + 1;
// for FP4, whose decode is cheapest that way, each whole 64-column block is two chunks, its
// even columns then its odd ones, so lane i takes columns 4i and 4i + 2, then 4i + 1 and
// 4i + 3), then summed horizontally in one fixed order. That sequence does not depend on the batch,
// the row range or the thread, so every row of a batch equals the GEMV's bit for bit. The
// instruction treats bf16 and fp32 subnormals as zero, which no weight of a sane checkpoint
// (scales near 1) or activation of the model reaches.
namespace avx512bf16 {
// Columns of one rounded activation row: K rounded up to whole 32-column chunks.
inline int64_t padded_cols(int64_t cols) { return (cols + 31) / 32 * 32; }
// x [batch, cols] -> xb [batch, padded_cols(cols)] bf16, zero beyond cols.
void round_x(const float* x, int64_t batch, int64_t cols, uint16_t* xb);
// The same for FP4 weights (cols a multiple of 32), in fp4_rows' column order: each whole
// 64-column block's even columns, then its odd ones; a last lone 32 in order.
void round_x_fp4(const float* x, int64_t batch, int64_t cols, uint16_t* xb);
// Bytes of per-thread scratch the row kernels need for weights of `cols` columns (a panel of
// decoded weight rows, used when batch > 1).
inline int64_t scratch_bytes(int64_t cols) { return 4 * padded_cols(cols) * 2; }
// Rows [r0, r1) of y [batch, W.rows] = x W^T from round_x(x) (FP4: round_x_fp4(x)).
// REQUIRES: scratch holds scratch_bytes(W.cols) bytes, 64-byte aligned, private to the
// caller's thread.
void fp8_rows(const Fp8Matrix& w, const uint16_t* xb, int64_t batch, float* y, int64_t r0,
              int64_t r1, void* scratch);
void fp4_rows(const Fp4Matrix& w, const uint16_t* xb, int64_t batch, float* y, int64_t r0,
              int64_t r1, void* scratch);
void bf16_rows(const Bf16Matrix& w, const uint16_t* xb, int64_t batch, float* y, int64_t r0,
               int64_t r1, void* scratch);
}  // namespace avx512bf16

}  // namespace fathom::kernels::cpu
