#include "model/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

namespace fathom::model {

size_t NpyArray::elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

Result<NpyArray> read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  auto bad = [&](const std::string& m) { return corrupt(path + ": " + m); };
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) return bad("not a .npy file");
  const int major = static_cast<unsigned char>(data[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len =
        static_cast<unsigned char>(data[8]) | (size_t(static_cast<unsigned char>(data[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12) return bad("truncated header");
    uint32_t n;
    std::memcpy(&n, data.data() + 8, 4);
    header_len = n;
    offset = 12;
  } else {
    return bad("unsupported .npy version");
  }
  if (offset + header_len > data.size()) return bad("header runs past the end");
  std::string h = data.substr(offset, header_len);
  NpyArray a;
  auto field = [&](const std::string& key) -> std::string {
    size_t p = h.find("'" + key + "'");
    if (p == std::string::npos) return "";
    p = h.find(':', p);
    return p == std::string::npos ? "" : h.substr(p + 1);
  };
  std::string d = field("descr");
  size_t q1 = d.find('\''), q2 = q1 == std::string::npos ? q1 : d.find('\'', q1 + 1);
  if (q2 == std::string::npos) return bad("no dtype");
  a.dtype = d.substr(q1 + 1, q2 - q1 - 1);
  if (field("fortran_order").find("False") != 0 && field("fortran_order").find(" False") != 0)
    return bad("Fortran order is not supported");
  std::string s = field("shape");
  size_t l = s.find('('), r = s.find(')');
  if (l == std::string::npos || r == std::string::npos) return bad("no shape");
  std::stringstream dims(s.substr(l + 1, r - l - 1));
  std::string tok;
  while (std::getline(dims, tok, ',')) {
    if (tok.find_first_not_of(" ") == std::string::npos) continue;
    a.shape.push_back(std::stoll(tok));
  }
  size_t width = a.dtype == "<f4" || a.dtype == "<i4" ? 4 : a.dtype == "<i8" ? 8 : 0;
  if (width == 0) return unsupported(path + ": dtype " + a.dtype);
  size_t n = a.elements(), start = offset + header_len;
  if (data.size() - start != n * width) return bad("data size does not match the shape");
  const char* p = data.data() + start;
  if (a.dtype == "<f4") {
    a.f32.resize(n);
    std::memcpy(a.f32.data(), p, n * 4);
  } else if (a.dtype == "<i4") {
    a.i64.resize(n);
    for (size_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      a.i64[i] = v;
    }
  } else {
    a.i64.resize(n);
    std::memcpy(a.i64.data(), p, n * 8);
  }
  return a;
}

}  // namespace fathom::model
