// The AMX attention row (attention_amx.cc), called by attention.cc. Private to kernels/cpu.
//
// attention_amx.cc is compiled with -mamx-* and -mavx512*: like gemm_amx.cc it includes only
// this header (and gemm_amx.h) and defines nothing with linkage the baseline files could
// share; scratch lives in attention.cc.
#pragma once

#include <cstdint>

namespace fathom::kernels::cpu::amx {

// Bytes of scratch attention_row() needs for n entries. REQUIRES: heads <= 64, dim % 32 == 0,
// dim <= 1024.
int64_t attention_scratch_bytes(int64_t heads, int64_t dim, int64_t n);

// One query row (kernels/attention.h) over n entries, none null. REQUIRES: scratch holds
// attention_scratch_bytes(heads, dim, n) bytes, 64-byte aligned, private to the caller's
// thread.
void attention_row(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                   int64_t n, const float* sink, float scale, float* out, void* scratch);

// Bytes of scratch index_scores() needs.
int64_t index_scratch_bytes(int64_t heads, int64_t dim);

// The indexer's scores of one query row (kernels/attention.h) against n bf16 keys [n16, dim]
// (n16 = n rounded up to 16, the rows past n zero). REQUIRES: scratch holds
// index_scratch_bytes(heads, dim) bytes, 64-byte aligned, private to the caller's thread.
void index_scores(const float* q, const float* w, int64_t heads, int64_t dim, const uint16_t* keys,
                  int64_t n, float* out, void* scratch);

// n rows of fp32 keys (`stride` floats apart) to bf16 [n, dim].
void keys_to_bf16(const float* keys, int64_t n, int64_t stride, int64_t dim, uint16_t* out);

}  // namespace fathom::kernels::cpu::amx
