// The AMX row kernels (gemm_amx.cc), called by dispatch.cc. Private to kernels/cpu.
//
// gemm_amx.cc is compiled with -mamx-* and -mavx512*: like gemv_avx512.cc it must not define
// or instantiate anything the linker could share with baseline files, so it includes only
// this header and amx_common.h and holds kernels over raw pointers; threading and scratch live in
// dispatch.cc.
#pragma once

#include <cstdint>

#include "kernels/gemv.h"

namespace fathom::kernels::cpu {

// AMX BF16 tiles (TDPBF16PS) for every batch size, the decode GEMV included. Weights are the
// tiles' A operand (16 output rows x 32 columns of K), decoded to bf16 exactly (a weight and
// its power-of-two scale are one bf16 value; BF16 weights are loaded as they are); the
// activations, rounded to bf16 (ties to even), are the B operand (16 pairs of K x one column
// per activation row), packed once per call by pack_product_x(); C accumulates in fp32 over K
// in ascending 32-column steps. Every C element is computed by the same sequence of tile
// operations whatever the batch, the row range or the thread (a batch of up to 16 rows runs
// on tiles configured with only its columns, which changes no element's value: checked
// bit for bit against the 16-column tiles by the batch-invariance tests), so each row of a
// batch equals the GEMV's bit for bit. The model's activations are bf16 values already
// (fake-quantised to E4M3 or rounded to bf16 before every product), so only the order of
// the fp32 sums differs from the AVX-512 path.
//
// Tiles are configured per thread as each kernel needs them (the process must hold Linux's
// tile permission: cpu_features.cc asks for it).
namespace amx {
// Bytes of packed activations for `batch` rows of `cols`: one 1 KiB tile per 16 rows and 32
// columns.
inline int64_t packed_x_bytes(int64_t batch, int64_t cols) {
  return ((batch + 15) / 16) * ((cols + 31) / 32) * 1024;
}
// x [batch, cols] fp32 -> bf16 B tiles of 16 columns, zero beyond batch and cols. REQUIRES:
// out holds packed_x_bytes(batch, cols) bytes, 64-byte aligned.
void pack_x(const float* x, int64_t batch, int64_t cols, uint16_t* out);
// pack_x() of the activation tiles [nt0, nt1) only (rows 16 * nt0 ..): the same bytes.
void pack_x_tiles(const float* x, int64_t batch, int64_t cols, uint16_t* out, int64_t nt0,
                  int64_t nt1);
// The products' activations: up to 16 rows packed as B tiles of `batch` columns (a 4-byte
// pair per row: the GEMV's x is its bf16 values in order), more as pack_x().
inline int64_t product_x_bytes(int64_t batch, int64_t cols) {
  return batch <= 16 ? (cols + 31) / 32 * 64 * batch : packed_x_bytes(batch, cols);
}
void pack_product_x(const float* x, int64_t batch, int64_t cols, uint16_t* out);
// Bytes of per-thread scratch the row kernels need.
int64_t scratch_bytes();
// Rows [r0, r1) of y [batch, W.rows] = x W^T from pack_product_x(x). REQUIRES: r0 % 16 == 0;
// scratch holds scratch_bytes() bytes, 64-byte aligned, private to the caller's thread.
void fp8_rows(const Fp8Matrix& w, const uint16_t* xp, int64_t batch, float* y, int64_t r0,
              int64_t r1, void* scratch);
void fp4_rows(const Fp4Matrix& w, const uint16_t* xp, int64_t batch, float* y, int64_t r0,
              int64_t r1, void* scratch);
void bf16_rows(const Bf16Matrix& w, const uint16_t* xp, int64_t batch, float* y, int64_t r0,
               int64_t r1, void* scratch);
}  // namespace amx

}  // namespace fathom::kernels::cpu
