#include "model/safetensors.h"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace fathom::model {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kF32:
      return "F32";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kF8E8M0:
      return "F8_E8M0";
    case DType::kI8:
      return "I8";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
    case DType::kBool:
      return "BOOL";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    default:
      return 1;
  }
}

size_t TensorInfo::elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

namespace {

bool parse_dtype(std::string_view s, DType* d) {
  static const std::pair<std::string_view, DType> kNames[] = {
      {"BF16", DType::kBF16},      {"F16", DType::kF16},        {"F32", DType::kF32},
      {"F8_E4M3", DType::kF8E4M3}, {"F8_E8M0", DType::kF8E8M0}, {"I8", DType::kI8},
      {"I32", DType::kI32},        {"I64", DType::kI64},        {"U8", DType::kU8},
      {"BOOL", DType::kBool}};
  for (const auto& [n, v] : kNames) {
    if (s == n) {
      *d = v;
      return true;
    }
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return io_error("cannot stat '" + path + "'");
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  auto fail = [&](const std::string& m) { return corrupt(path + ": " + m); };
  if (f->size_ < 8) {
    ::close(fd);
    return fail("truncated: " + std::to_string(f->size_) + " bytes, no header length");
  }
  f->map_ = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    return io_error("cannot map '" + path + "'");
  }
  const auto* base = static_cast<const uint8_t*>(f->map_);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian on x86-64
  if (header_len == 0 || header_len > f->size_ - 8 || header_len > (100u << 20)) {
    return fail("header length " + std::to_string(header_len) + " does not fit the file (" +
                std::to_string(f->size_) + " bytes)");
  }
  const size_t data_start = 8 + header_len;
  const size_t data_size = f->size_ - data_start;
  simdjson::dom::parser parser;
  simdjson::padded_string header(reinterpret_cast<const char*>(base + 8), header_len);
  simdjson::dom::object obj;
  if (parser.parse(header).get(obj) != simdjson::SUCCESS)
    return fail("header is not a JSON object");
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto field : obj) {
    if (field.key == "__metadata__") continue;
    TensorInfo t;
    t.name = std::string(field.key);
    simdjson::dom::object spec;
    std::string_view dtype;
    simdjson::dom::array shape, offsets;
    if (field.value.get(spec) != simdjson::SUCCESS ||
        spec["dtype"].get(dtype) != simdjson::SUCCESS ||
        spec["shape"].get(shape) != simdjson::SUCCESS ||
        spec["data_offsets"].get(offsets) != simdjson::SUCCESS) {
      return fail("tensor '" + t.name + "' needs dtype, shape and data_offsets");
    }
    if (!parse_dtype(dtype, &t.dtype))
      return unsupported(path + ": tensor '" + t.name + "' has unsupported dtype " +
                         std::string(dtype));
    size_t elems = 1;
    for (auto d : shape) {
      int64_t v = 0;
      if (d.get(v) != simdjson::SUCCESS || v < 0 || v > (int64_t(1) << 40))
        return fail("tensor '" + t.name + "' has a bad shape");
      t.shape.push_back(v);
      if (v != 0 && elems > (size_t(1) << 50) / size_t(v))
        return fail("tensor '" + t.name + "' is too large");
      elems *= size_t(v);
    }
    uint64_t begin = 0, end = 0;
    if (offsets.size() != 2 || offsets.at(0).get(begin) != simdjson::SUCCESS ||
        offsets.at(1).get(end) != simdjson::SUCCESS || begin > end) {
      return fail("tensor '" + t.name + "' has bad data_offsets");
    }
    if (end > data_size) {
      return fail("tensor '" + t.name + "' points past the end of the file (offset " +
                  std::to_string(end) + " > " + std::to_string(data_size) + " data bytes)");
    }
    if (end - begin != elems * dtype_size(t.dtype)) {
      return fail("tensor '" + t.name + "': " + std::to_string(end - begin) +
                  " bytes for shape of " + std::to_string(elems) + " " + dtype_name(t.dtype) +
                  " elements");
    }
    t.data = base + data_start + begin;
    t.nbytes = size_t(end - begin);
    ranges.emplace_back(begin, end);
    f->tensors_.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return fail("tensor data ranges overlap");
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, size_);
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& path) {
  auto ck = std::make_unique<Checkpoint>();
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return not_found("no checkpoint at '" + path + "'");
  std::vector<std::string> files;
  if (S_ISDIR(st.st_mode)) {
    std::string index = path + "/model.safetensors.index.json";
    if (stat(index.c_str(), &st) == 0) {
      std::ifstream in(index);
      std::stringstream ss;
      ss << in.rdbuf();
      simdjson::dom::parser parser;
      simdjson::padded_string json(ss.str());
      simdjson::dom::object map;
      if (parser.parse(json)["weight_map"].get(map) != simdjson::SUCCESS) {
        return corrupt(index + ": no \"weight_map\" object");
      }
      std::set<std::string> shard_set;
      for (auto field : map) {
        std::string_view shard;
        if (field.value.get(shard) != simdjson::SUCCESS ||
            shard.find('/') != std::string_view::npos) {
          return corrupt(index + ": bad shard name for '" + std::string(field.key) + "'");
        }
        shard_set.insert(std::string(shard));
      }
      for (const auto& s : shard_set) files.push_back(path + "/" + s);
    } else {
      files.push_back(path + "/model.safetensors");
    }
  } else {
    files.push_back(path);
  }
  for (const auto& file : files) {
    FATHOM_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(file));
    ck->files_.push_back(std::move(f));
  }
  for (const auto& f : ck->files_) {
    for (const auto& t : f->tensors()) {
      if (!ck->by_name_.emplace(t.name, &t).second)
        return corrupt("tensor '" + t.name + "' appears in two shards");
    }
  }
  return ck;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : by_name_) n += t->nbytes;
  return n;
}

}  // namespace fathom::model
