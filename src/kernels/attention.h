// Sparse attention of one query row on AMX tiles: H heads against a list of shared latent
// KV entries (K = V, as V4.1's attention, shared/spec/model-v41.md §6.3), with an attention
// sink per head. The scores q·e are tile products (bf16 operands, fp32 sums), scaled; the
// softmax takes the row's maximum, exp in fp32, and sums the fp32 probabilities in entry
// order (plus exp(sink - max)); the probabilities are rounded to bf16 (as the reference
// rounds them) for the value product, another tile product over the entries in their order,
// 32 at a time; the output is rounded to bf16. Its operands are exact in bf16 in V4.1 (the
// query is rounded to bf16 after RoPE, the entries are fake-quantised to E4M3 or E2M1), so
// it differs from model::sparse_attention_fast only in the order of the fp32 sums.
//
// A row's result depends only on its own query and entries (their order, not their place
// in memory or the other rows), so a prompt row gets the same bits whatever its chunk and a
// decode row alone or among others. Available on the AMX path (kernels/cpu_features.h).
// Thread-safe: scratch is per thread.
#pragma once

#include <cstdint>

namespace fathom::kernels::cpu {

// Whether sparse_attention_amx() takes these shapes: dim a multiple of 32 up to 1024,
// heads up to 64.
bool sparse_attention_amx_supported(int64_t heads, int64_t dim);

// q [heads, dim]; entries[i] points at a [dim] row or is null (skipped); sink [heads]; out
// [heads, dim]. REQUIRES: cpu_path_available(CpuPath::kAmx) and the shapes supported.
void sparse_attention_amx(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                          int64_t n_entries, const float* sink, float scale, float* out);

// The same row with AVX-512 BF16 dot products (VDPBF16PS; attention_avx512bf16.cc): the same
// operands, rounding points, softmax and invariances, with the fp32 sums in its own order;
// besides, a head's result does not depend on the other heads of the call. Takes the shapes
// sparse_attention_amx_supported() accepts. REQUIRES: cpu_path_available(kAvx512Bf16).
void sparse_attention_avx512bf16(const float* q, int64_t heads, int64_t dim,
                                 const float* const* entries, int64_t n_entries, const float* sink,
                                 float scale, float* out);

// The same row over entries held as bf16 rows (entries[i] a [dim] bf16 row from
// entries_to_bf16, or null): the same bits as on the float rows they were rounded from. A
// prompt chunk's rows share most of their entries, so converting each entry once for the
// chunk saves converting it again for every row. REQUIRES: as sparse_attention_avx512bf16.
void sparse_attention_avx512bf16_on_bf16(const float* q, int64_t heads, int64_t dim,
                                         const uint16_t* const* entries, int64_t n_entries,
                                         const float* sink, float scale, float* out);
// n contiguous rows of dim floats -> bf16 (ties to even), as the AVX-512 BF16 row rounds its
// entries. REQUIRES: cpu_path_available(kAvx512Bf16), dim % 32 == 0.
void entries_to_bf16(const float* rows, int64_t n, int64_t dim, uint16_t* out);

// The indexer's scores of one query row (V4.1's lightning indexer, model-v41.md §6.4) against
// n keys held as bf16 [n16, dim] (from keys_to_bf16): out[j] = bf16(sum_h bf16(relu(bf16(q_h ·
// k_j)) * w_h)), the dots tile products, the head sum in fp32 in head order. As the
// attention row, a key's score depends only on the query, the weights and that key.
// q [heads, dim] (bf16 values), w [heads]. REQUIRES: the AMX path, and shapes supported.
void index_scores_amx(const float* q, const float* w, int64_t heads, int64_t dim,
                      const uint16_t* keys, int64_t n, float* out);
// n key rows `stride` floats apart to bf16 [n, dim] (index_scores_amx wants the rows up to n
// rounded up to 16 there: the caller zeroes those). REQUIRES: out holds n * dim values.
void keys_to_bf16(const float* keys, int64_t n, int64_t stride, int64_t dim, uint16_t* out);

}  // namespace fathom::kernels::cpu
