// Which instruction-set path the fast kernels (kernels::cpu) run on. The binary is built for
// x86-64-v3 (AVX2/FMA/F16C) and carries wider paths in files of their own, compiled with
// their own flags; the first call detects the CPU (cpuid, and xgetbv for the OS-enabled
// register state) and picks, once for the process, the widest path that both the CPU and
// this build offer. FATHOM_CPU=avx2|avx512|avx512bf16|amx forces one; a path the CPU or the
// build lacks is refused with an error (the process exits 2 when the kernels find such a
// setting unchecked; the CLI checks it first with select_cpu_path()).
//
// Paths may round differently from one another (AVX-512 sums in 16 lanes, AVX2 in 8, AVX-512
// BF16 in 16 lanes of column pairs and AMX in its tiles' order, the last two on activations
// rounded to bf16); within one path every kernel is batch-invariant. Thread-safe: detection
// runs once, under the static-initialisation lock; everything afterwards is read-only.
#pragma once

#include <string>

#include "core/status.h"

namespace fathom::kernels {

enum class CpuPath {
  kAvx2,        // AVX2 + FMA + F16C: the baseline every build runs on
  kAvx512,      // AVX-512 F/BW/VL (decode GEMVs and their batched twins)
  kAvx512Bf16,  // AVX-512 BF16 dot products (VDPBF16PS) for every weight product, on
                // activations rounded to bf16: CPUs with AVX-512 BF16 but no AMX (Zen 4)
  kAmx,         // AMX BF16 tiles for every weight product (+ AVX-512 BF16/VBMI to decode), after
                // Linux grants the tile permission
};

inline constexpr CpuPath kAllCpuPaths[] = {CpuPath::kAvx2, CpuPath::kAvx512, CpuPath::kAvx512Bf16,
                                           CpuPath::kAmx};

// "avx2", "avx512", "avx512bf16", "amx".
const char* cpu_path_name(CpuPath path);

// True when this CPU (and OS) has the path's instructions and this build implements it.
bool cpu_path_available(CpuPath path);

// Why an unavailable path is unavailable ("the CPU lacks avx512bw", "the CPU lacks Linux's
// tile permission"); empty for an available one.
std::string cpu_path_missing(CpuPath path);

// The path chosen for this process: FATHOM_CPU when set (REQUIRES: valid and available,
// else the process exits 2 with the reason on stderr), otherwise the widest available.
CpuPath cpu_path();

// Checks FATHOM_CPU and returns the path cpu_path() will use: invalid_argument for a name
// that is not a path, unsupported for a path this CPU or build lacks.
Result<CpuPath> select_cpu_path();

// The detected features in one line, e.g. "avx2 fma f16c avx512f avx512bw avx512vl
// avx512vnni avx512bf16 amx-tile amx-bf16 amx-int8 (tiles permitted)".
std::string cpu_features_summary();

}  // namespace fathom::kernels
