// Matrix-vector and matrix-matrix products with checkpoint-format weights: y = W x for N
// activation rows. W is [M, K] row-major in the checkpoint's own encoding (never
// dequantized in memory). Every fast kernel (kernels/cpu, fp32 accumulation, threaded over
// the pool, on the instruction-set path kernels/cpu_features.h picks) has a scalar twin in
// kernels/ref (double accumulation, rounded once) that defines what it computes; tests
// compare the two on every path the machine has. Within a path the fast kernels are
// batch-invariant: each row of y is computed as it would be alone (batch 1, the GEMV).
// The AMX and AVX-512 BF16 paths multiply the activations rounded to bf16 (ties to even):
// their twin is the reference on bf16(x) (the model's activations are bf16 values already).
// Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fathom {
class ThreadPool;
}

namespace fathom::kernels {

enum class CpuPath;  // kernels/cpu_features.h

// FP8 E4M3 weights, UE8M0 scales per 32x32 block: scale [ceil(M/32), ceil(K/32)].
struct Fp8Matrix {
  const uint8_t* weight;
  const uint8_t* scale;
  int64_t rows, cols;
};
// FP4 E2M1 pairs (low nibble = even column), UE8M0 scales per 32 columns: scale [M, K/32].
// REQUIRES: cols % 32 == 0.
struct Fp4Matrix {
  const uint8_t* weight;
  const uint8_t* scale;
  int64_t rows, cols;
};
struct Bf16Matrix {
  const uint16_t* weight;
  int64_t rows, cols;
};

// How a reference product is rounded: once to fp32, or once (straight from double) to bf16
// as the reference's FP8/FP4 GEMMs do.
enum class OutRounding { kF32, kBF16 };

// y[n, m] = sum_k W[m, k] x[n, k] for n < batch. x is [batch, K], y is [batch, M].
namespace ref {
void matmul_fp8(const Fp8Matrix& w, const float* x, int64_t batch, float* y,
                OutRounding out = OutRounding::kF32);
void matmul_fp4(const Fp4Matrix& w, const float* x, int64_t batch, float* y,
                OutRounding out = OutRounding::kF32);
void matmul_bf16(const Bf16Matrix& w, const float* x, int64_t batch, float* y);
}  // namespace ref

// Whether a path multiplies bf16(x) rather than x (AMX tiles and VDPBF16PS take bf16
// operands).
bool rounds_activations_to_bf16(CpuPath path);

// On the process's path (cpu_path()).
namespace cpu {
void matmul_fp8(const Fp8Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool);
void matmul_fp4(const Fp4Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool);
void matmul_bf16(const Bf16Matrix& w, const float* x, int64_t batch, float* y, ThreadPool* pool);
// On a named path (tests and benchmarks). REQUIRES: cpu_path_available(path).
void matmul_fp8(CpuPath path, const Fp8Matrix& w, const float* x, int64_t batch, float* y,
                ThreadPool* pool);
void matmul_fp4(CpuPath path, const Fp4Matrix& w, const float* x, int64_t batch, float* y,
                ThreadPool* pool);
void matmul_bf16(CpuPath path, const Bf16Matrix& w, const float* x, int64_t batch, float* y,
                 ThreadPool* pool);
}  // namespace cpu

}  // namespace fathom::kernels
