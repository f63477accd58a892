// Reading NumPy .npy files (format 1.0/2.0, little-endian, C order; float32, int32, int64):
// the format the golden tensors ship in. The header is validated against the file size.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fathom::model {

struct NpyArray {
  std::string dtype;  // "<f4", "<i4", "<i8"
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<int64_t> i64;  // int32 and int64 data, widened
  size_t elements() const;
};

Result<NpyArray> read_npy(const std::string& path);

}  // namespace fathom::model
