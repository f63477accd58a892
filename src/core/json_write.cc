#include "core/json_write.h"

#include <charconv>

namespace fathom::json {

void append_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t run = 0;
  auto flush = [&](size_t i) { out.append(s.data() + run, i - run); };
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    const char* esc = nullptr;
    size_t skip = 1;
    char buf[8];
    if (c == '"') {
      esc = "\\\"";
    } else if (c == '\\') {
      esc = "\\\\";
    } else if (c == '\n') {
      esc = "\\n";
    } else if (c == '\r') {
      esc = "\\r";
    } else if (c == '\t') {
      esc = "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      buf[0] = '\\', buf[1] = 'u', buf[2] = '0', buf[3] = '0', buf[4] = kHex[c >> 4],
      buf[5] = kHex[c & 15], buf[6] = 0;
      esc = buf;
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      esc = "\\u0085";
      skip = 2;
    } else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 ||
                static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      esc = static_cast<unsigned char>(s[i + 2]) == 0xA8 ? "\\u2028" : "\\u2029";
      skip = 3;
    }
    if (esc != nullptr) {
      flush(i);
      out.append(esc);
      i += skip - 1;
      run = i + 1;
    }
  }
  flush(s.size());
  out.push_back('"');
}

void append_int_array(std::string& out, std::span<const int32_t> values) {
  out.push_back('[');
  char buf[16];
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out.push_back(',');
    auto r = std::to_chars(buf, buf + sizeof buf, values[i]);
    out.append(buf, r.ptr);
  }
  out.push_back(']');
}

}  // namespace fathom::json
