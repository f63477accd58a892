// The AVX-512 twin of kernels::cpu::dots_f64_lanes (dots_avx512.cc), called by dots.cc.
// Private to kernels/cpu. dots_avx512.cc is compiled with -mavx512f: like gemv_avx512.cc it
// includes only this header and <immintrin.h>, and defines nothing the linker could share
// with baseline files.
#pragma once

#include <cstdint>

namespace fathom::kernels::cpu::avx512 {
// As kernels::cpu::dots_f64_lanes (kernels/dot.h): eight lanes in one zmm register.
void dots_f64_lanes(const float* x, int64_t rows, int64_t n, const float* w, int64_t outs,
                    double* d);
}  // namespace fathom::kernels::cpu::avx512
