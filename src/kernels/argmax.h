// The first maximum of a float array, as the scalar loop `best = 0; for i: if (x[i] > x[best])
// best = i` finds it: ties go to the lower index, NaNs never win (and a NaN at index 0 is
// never beaten). ref:: is that loop; cpu:: takes the maximum eight lanes at a time (AVX2, the
// baseline) and then the first index holding it — the same index. Greedy sampling's hot
// path. Pure functions; any thread.
#pragma once

#include <cstdint>

namespace fathom::kernels {
namespace ref {
int64_t argmax_first(const float* x, int64_t n);  // n >= 1
}  // namespace ref
namespace cpu {
int64_t argmax_first(const float* x, int64_t n);  // n >= 1
}  // namespace cpu
}  // namespace fathom::kernels
