// The V4.1 sparse attention kernel (ref `sparse_attn`, shared/spec/model-v41.md §6.3) in the
// strict arithmetic of the golden data: one query row of H heads against a list of shared
// latent KV entries (K = V), visited in chunks of 64 with an online softmax whose running
// max starts at -1e30; scores q·k accumulated in double and rounded to fp32, then scaled;
// probabilities exp(s - max) rounded to bf16 before the value product; the fp32 denominator
// gets exp(sink - max) after the last chunk; the output is rounded to bf16. Pure function;
// any thread.
#pragma once

#include <cstdint>

namespace fathom::model {

// q [heads, dim]; entries[i] points at a [dim] KV row or is null (an empty slot);
// sink [heads]; out [heads, dim]. dim <= 1024.
void sparse_attention(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                      int64_t n_entries, const float* sink, float scale, float* out);

// The `fast` numerics: the same chunks, rounding points (bf16 probabilities, bf16 output)
// and sink, with fp32 accumulation and fp32 exp.
void sparse_attention_fast(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                           int64_t n_entries, const float* sink, float scale, float* out);

// The row as the given numerics run it: strict, or fast — on AMX tiles where the kernel path
// is AMX, with AVX-512 BF16 dot products where it is avx512bf16 (kernels/attention.h), else
// sparse_attention_fast(). The last two compute each head alone (a caller may split the
// heads, running the kernel the whole call would run).
void attend(bool fast, const float* q, int64_t heads, int64_t dim, const float* const* entries,
            int64_t n_entries, const float* sink, float scale, float* out);

}  // namespace fathom::model
