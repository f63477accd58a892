// Safetensors checkpoints: one file, or shards listed by model.safetensors.index.json.
// Files are memory-mapped, never copied; every header is validated (length, JSON, dtypes,
// shapes against byte sizes, offsets inside the file, no overlaps) before any tensor is
// used. A Checkpoint is immutable once open and may be read from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace fathom::model {

enum class DType { kBF16, kF16, kF32, kF8E4M3, kF8E8M0, kI8, kI32, kI64, kU8, kBool };

const char* dtype_name(DType d);
size_t dtype_size(DType d);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
  size_t elements() const;
};

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }
  size_t size() const { return size_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorInfo> tensors_;
};

// All tensors of a checkpoint directory (or of one file), by name.
class Checkpoint {
 public:
  // `path` is a directory (model.safetensors.index.json, or a single model.safetensors) or a
  // .safetensors file.
  static Result<std::unique_ptr<Checkpoint>> open(const std::string& path);

  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, const TensorInfo*>& tensors() const { return by_name_; }
  size_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> by_name_;
};

}  // namespace fathom::model
