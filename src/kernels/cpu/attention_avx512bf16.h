// The AVX-512 BF16 attention row (attention_avx512bf16.cc), called by attention.cc. Private to
// kernels/cpu.
//
// attention_avx512bf16.cc is compiled with -mavx512bf16: like gemm_avx512bf16.cc it includes
// only this header and defines nothing with linkage the baseline files could share; scratch
// lives in attention.cc.
#pragma once

#include <cstdint>

namespace fathom::kernels::cpu::avx512bf16 {

// Bytes of scratch attention_row() needs for n entries. REQUIRES: heads <= 64, dim % 32 == 0,
// dim <= 1024.
int64_t attention_scratch_bytes(int64_t heads, int64_t dim, int64_t n);

// One query row (kernels/attention.h) over n entries, none null. REQUIRES: scratch holds
// attention_scratch_bytes(heads, dim, n) bytes, 64-byte aligned, private to the caller's
// thread.
void attention_row(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                   int64_t n, const float* sink, float scale, float* out, void* scratch);
// The same row over entries held as bf16 rows: the bits of the row above on the float rows
// they were rounded from (ties to even).
void attention_row(const float* q, int64_t heads, int64_t dim, const uint16_t* const* entries,
                   int64_t n, const float* sink, float scale, float* out, void* scratch);

// n * dim floats -> bf16 (ties to even), as attention_row rounds float entries. REQUIRES:
// dim % 32 == 0.
void rows_to_bf16(const float* rows, int64_t n, int64_t dim, uint16_t* out);

}  // namespace fathom::kernels::cpu::avx512bf16
