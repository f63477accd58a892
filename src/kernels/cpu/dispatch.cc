// kernels::cpu's entry points: each runs the kernel of the process's path (cpu_features.h),
// or of a named one, threading it over the pool and owning the AVX-512 kernels' scratch
// (thread-local, so concurrent callers never share it). Compiled for the baseline.
#include <vector>

#include "kernels/cpu/paths.h"
#include "kernels/cpu_features.h"
#include "kernels/gemv.h"

namespace fathom::kernels::cpu {
namespace {

float* scratch(int64_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(floats)) buf.resize(size_t(floats));
  return buf.data();
}

}  // namespace

void matmul_fp8(const Fp8Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool) {
  matmul_fp8(cpu_path(), w, x, batch, y, pool);
}
void matmul_fp4(const Fp4Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool) {
  matmul_fp4(cpu_path(), w, x, batch, y, pool);
}
void matmul_bf16(const Bf16Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool) {
  matmul_bf16(cpu_path(), w, x, batch, y, pool);
}

void matmul_fp8(CpuPath path, const Fp8Matrix& w, const float* x, int64_t batch, float* y,
                ThreadPool* pool) {
  if (path == CpuPath::kAvx2) return avx2::matmul_fp8(w, x, batch, y, pool);
  const int64_t need = avx512::fp8_scratch_floats(w.cols);
  over_rows(w.rows, pool, [&](int64_t r0, int64_t r1) {
    avx512::fp8_rows(w, x, batch, y, r0, r1, scratch(need));
  });
}

void matmul_fp4(CpuPath path, const Fp4Matrix& w, const float* x, int64_t batch, float* y,
                ThreadPool* pool) {
  if (path == CpuPath::kAvx2) return avx2::matmul_fp4(w, x, batch, y, pool);
  // x in even/odd order once, shared by every thread.
  thread_local std::vector<float> xp;
  xp.resize(size_t(batch * w.cols));
  avx512::fp4_even_odd(x, batch, w.cols, xp.data());
  const float* xpd = xp.data();
  over_rows(w.rows, pool,
            [&](int64_t r0, int64_t r1) { avx512::fp4_rows(w, xpd, batch, y, r0, r1); });
}

void matmul_bf16(CpuPath path, const Bf16Matrix& w, const float* x, int64_t batch, float* y,
                 ThreadPool* pool) {
  if (path == CpuPath::kAvx2) return avx2::matmul_bf16(w, x, batch, y, pool);
  over_rows(w.rows, pool,
            [&](int64_t r0, int64_t r1) { avx512::bf16_rows(w, x, batch, y, r0, r1); });
}

}  // namespace fathom::kernels::cpu
