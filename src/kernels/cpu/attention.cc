// kernels::cpu's sparse attention entry points: drop the empty slots from the entry list and
// run the AMX row (attention_amx.cc) or the AVX-512 BF16 row (attention_avx512bf16.cc) with a
// thread-local scratch. Compiled for the baseline.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/attention_avx512bf16.h"

namespace fathom::kernels::cpu {

bool sparse_attention_amx_supported(int64_t heads, int64_t dim) {
  return heads >= 1 && heads <= 64 && dim >= 32 && dim % 32 == 0 && dim <= 1024;
}

namespace {

// Runs row(list, n, scratch) on the non-empty entries with this thread's scratch of
// bytes(n) bytes.
template <typename E, typename Bytes, typename Row>
void on_listed_entries(const E* const* entries, int64_t n_entries, Bytes bytes, Row row) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::vector<const E*> list;
  thread_local std::unique_ptr<void, Free> scratch;
  thread_local int64_t scratch_size = 0;
  list.clear();
  for (int64_t i = 0; i < n_entries; ++i)
    if (entries[i] != nullptr) list.push_back(entries[i]);
  const int64_t n = int64_t(list.size());
  const int64_t need = bytes(std::max<int64_t>(n, 1));
  if (need > scratch_size) {
    scratch.reset(std::aligned_alloc(64, size_t((need + 63) / 64 * 64)));
    scratch_size = need;
  }
  row(list.data(), n, scratch.get());
}

}  // namespace

void sparse_attention_amx(const float* q, int64_t heads, int64_t dim, const float* const* entries,
                          int64_t n_entries, const float* sink, float scale, float* out) {
  on_listed_entries(
      entries, n_entries, [&](int64_t n) { return amx::attention_scratch_bytes(heads, dim, n); },
      [&](const float* const* list, int64_t n, void* scratch) {
        amx::attention_row(q, heads, dim, list, n, sink, scale, out, scratch);
      });
}

void sparse_attention_avx512bf16(const float* q, int64_t heads, int64_t dim,
                                 const float* const* entries, int64_t n_entries, const float* sink,
                                 float scale, float* out) {
  on_listed_entries(
      entries, n_entries,
      [&](int64_t n) { return avx512bf16::attention_scratch_bytes(heads, dim, n); },
      [&](const float* const* list, int64_t n, void* scratch) {
        avx512bf16::attention_row(q, heads, dim, list, n, sink, scale, out, scratch);
      });
}

void sparse_attention_avx512bf16_on_bf16(const float* q, int64_t heads, int64_t dim,
                                         const uint16_t* const* entries, int64_t n_entries,
                                         const float* sink, float scale, float* out) {
  on_listed_entries(
      entries, n_entries,
      [&](int64_t n) { return avx512bf16::attention_scratch_bytes(heads, dim, n); },
      [&](const uint16_t* const* list, int64_t n, void* scratch) {
        avx512bf16::attention_row(q, heads, dim, list, n, sink, scale, out, scratch);
      });
}

void entries_to_bf16(const float* rows, int64_t n, int64_t dim, uint16_t* out) {
  avx512bf16::rows_to_bf16(rows, n, dim, out);
}

void index_scores_amx(const float* q, const float* w, int64_t heads, int64_t dim,
                      const uint16_t* keys, int64_t n, float* out) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> scratch;
  thread_local int64_t scratch_size = 0;
  const int64_t need = amx::index_scratch_bytes(heads, dim);
  if (need > scratch_size) {
    scratch.reset(std::aligned_alloc(64, size_t((need + 63) / 64 * 64)));
    scratch_size = need;
  }
  amx::index_scores(q, w, heads, dim, keys, n, out, scratch.get());
}

void keys_to_bf16(const float* keys, int64_t n, int64_t stride, int64_t dim, uint16_t* out) {
  amx::keys_to_bf16(keys, n, stride, dim, out);
}

}  // namespace fathom::kernels::cpu
