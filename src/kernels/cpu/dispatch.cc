// kernels::cpu's entry points: each runs the kernel of the process's path (cpu_features.h),
// or of a named one, threading it over the pool and owning the AVX-512 and AMX kernels'
// scratch (thread-local, so concurrent callers never share it). Compiled for the baseline.
#include <cstdlib>
#include <memory>
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

// A thread-local 64-byte-aligned buffer that grows to the largest size asked of it.
class AlignedScratch {
 public:
  void* get(int64_t bytes) {
    if (bytes > size_) {
      p_.reset(static_cast<char*>(std::aligned_alloc(64, size_t((bytes + 63) / 64 * 64))));
      size_ = bytes;
    }
    return p_.get();
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> p_;
  int64_t size_ = 0;
};

// The AMX kernels: x packed once into bf16 tiles (shared by every thread), then runs of
// whole 64-row panels over the pool.
template <typename RowFn>
void amx_product(const float* x, int64_t batch, int64_t rows, int64_t cols, ThreadPool* pool,
                 RowFn fn) {
  thread_local AlignedScratch packed;
  auto* xp = static_cast<uint16_t*>(packed.get(amx::product_x_bytes(batch, cols)));
  const size_t threads = pool ? pool->size() : 1;
  // More than 16 rows: full activation tiles, packed over the pool (a tile's bytes do not
  // depend on which thread packs it).
  const int64_t x_tiles = (batch + 15) / 16;
  if (batch > 16 && threads > 1)
    pool->parallel_for(size_t(x_tiles), [&](size_t nt) {
      amx::pack_x_tiles(x, batch, cols, xp, int64_t(nt), int64_t(nt) + 1);
    });
  else
    amx::pack_product_x(x, batch, cols, xp);
  constexpr int64_t kPanel = 64;
  const int64_t panels = (rows + kPanel - 1) / kPanel;
  const int64_t per = std::max<int64_t>(1, panels / int64_t(threads * 4));
  const size_t tasks = size_t((panels + per - 1) / per);
  auto run = [&](size_t t) {
    thread_local AlignedScratch scratch;
    const int64_t r0 = int64_t(t) * per * kPanel;
    fn(xp, r0, std::min(rows, r0 + per * kPanel), scratch.get(amx::scratch_bytes()));
  };
  if (pool != nullptr && tasks > 1) {
    pool->parallel_for(tasks, run);
  } else {
    for (size_t t = 0; t < tasks; ++t) run(t);
  }
}

// The AVX-512 BF16 kernels: x rounded to bf16 once (shared by every thread), then runs of
// whole 4-row blocks over the pool, each thread with its own panel scratch.
// `round` is avx512bf16::round_x, or round_x_fp4 for FP4 weights.
template <typename RowFn>
void bf16_dot_product(const float* x, int64_t batch, int64_t rows, int64_t cols, ThreadPool* pool,
                      RowFn fn,
                      void (*round)(const float*, int64_t, int64_t,
                                    uint16_t*) = avx512bf16::round_x) {
  thread_local AlignedScratch rounded;
  const int64_t kpad = avx512bf16::padded_cols(cols);
  auto* xb = static_cast<uint16_t*>(rounded.get(batch * kpad * 2));
  const size_t threads = pool ? pool->size() : 1;
  if (batch > 16 && threads > 1)
    for_each_row(pool, batch, [&](int64_t n) { round(x + n * cols, 1, cols, xb + n * kpad); });
  else
    round(x, batch, cols, xb);
  const int64_t need = avx512bf16::scratch_bytes(cols);
  over_rows(rows, pool, [&](int64_t r0, int64_t r1) {
    thread_local AlignedScratch panel;
    fn(xb, r0, r1, panel.get(need));
  });
}

}  // namespace

}  // namespace fathom::kernels::cpu

namespace fathom::kernels {
bool rounds_activations_to_bf16(CpuPath path) {
  return path == CpuPath::kAmx || path == CpuPath::kAvx512Bf16;
}
}  // namespace fathom::kernels

namespace fathom::kernels::cpu {

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
  if (path == CpuPath::kAmx)
    return amx_product(x, batch, w.rows, w.cols, pool,
                       [&](const uint16_t* xp, int64_t r0, int64_t r1, void* s) {
                         amx::fp8_rows(w, xp, batch, y, r0, r1, s);
                       });
  if (path == CpuPath::kAvx512Bf16)
    return bf16_dot_product(x, batch, w.rows, w.cols, pool,
                            [&](const uint16_t* xb, int64_t r0, int64_t r1, void* s) {
                              avx512bf16::fp8_rows(w, xb, batch, y, r0, r1, s);
                            });
  const int64_t need = avx512::fp8_scratch_floats(w.cols);
  over_rows(w.rows, pool, [&](int64_t r0, int64_t r1) {
    avx512::fp8_rows(w, x, batch, y, r0, r1, scratch(need));
  });
}

void matmul_fp4(CpuPath path, const Fp4Matrix& w, const float* x, int64_t batch, float* y,
                ThreadPool* pool) {
  if (path == CpuPath::kAvx2) return avx2::matmul_fp4(w, x, batch, y, pool);
  if (path == CpuPath::kAmx)
    return amx_product(x, batch, w.rows, w.cols, pool,
                       [&](const uint16_t* xp, int64_t r0, int64_t r1, void* s) {
                         amx::fp4_rows(w, xp, batch, y, r0, r1, s);
                       });
  if (path == CpuPath::kAvx512Bf16)
    return bf16_dot_product(
        x, batch, w.rows, w.cols, pool,
        [&](const uint16_t* xb, int64_t r0, int64_t r1, void* s) {
          avx512bf16::fp4_rows(w, xb, batch, y, r0, r1, s);
        },
        avx512bf16::round_x_fp4);
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
  if (path == CpuPath::kAmx)
    return amx_product(x, batch, w.rows, w.cols, pool,
                       [&](const uint16_t* xp, int64_t r0, int64_t r1, void* s) {
                         amx::bf16_rows(w, xp, batch, y, r0, r1, s);
                       });
  if (path == CpuPath::kAvx512Bf16)
    return bf16_dot_product(x, batch, w.rows, w.cols, pool,
                            [&](const uint16_t* xb, int64_t r0, int64_t r1, void* s) {
                              avx512bf16::bf16_rows(w, xb, batch, y, r0, r1, s);
                            });
  over_rows(w.rows, pool,
            [&](int64_t r0, int64_t r1) { avx512::bf16_rows(w, x, batch, y, r0, r1); });
}

}  // namespace fathom::kernels::cpu
