// The per-path kernels behind kernels::cpu's dispatch (dispatch.cc): one namespace per
// instruction-set path, each file compiled with its own flags. Private to kernels/cpu.
//
// The AVX-512 kernels are declared in gemv_avx512.h, the AVX-512 BF16 ones in
// gemm_avx512bf16.h, the AMX ones in gemm_amx.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_avx512bf16.h"
#include "kernels/cpu/gemv_avx512.h"
#include "kernels/gemv.h"

namespace fathom::kernels::cpu {

// Splits [0, rows) into runs of a multiple of 4 rows (about 8 per thread) and calls
// fn(first, end) for each, on the pool when there is one.
template <typename RowFn>
void over_rows(int64_t rows, ThreadPool* pool, RowFn fn) {
  size_t threads = pool ? pool->size() : 1;
  int64_t chunk = std::max<int64_t>(4, (rows / int64_t(threads * 8) + 3) / 4 * 4);
  size_t tasks = size_t((rows + chunk - 1) / chunk);
  auto run = [&](size_t t) { fn(int64_t(t) * chunk, std::min(rows, int64_t(t + 1) * chunk)); };
  if (pool != nullptr && tasks > 1) {
    pool->parallel_for(tasks, run);
  } else {
    for (size_t t = 0; t < tasks; ++t) run(t);
  }
}

namespace avx2 {
void matmul_fp8(const Fp8Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool);
void matmul_fp4(const Fp4Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool);
void matmul_bf16(const Bf16Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool);
}  // namespace avx2

}  // namespace fathom::kernels::cpu
