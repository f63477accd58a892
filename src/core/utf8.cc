#include "core/utf8.h"

#include <simdjson.h>

#include <string>

namespace fathom::utf8 {
namespace {

// For a lead byte, the number of continuation bytes and the allowed range of the first one
// (the Unicode Table 3-7 "well-formed byte sequences").
struct LeadInfo {
  uint8_t cont;  // continuation bytes after the lead; 0xFF = invalid lead
  uint8_t lo, hi;
};

inline LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {0, 0, 0};
  if (b < 0xC2) return {0xFF, 0, 0};
  if (b < 0xE0) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b < 0xF0) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b < 0xF4) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {0xFF, 0, 0};
}

// Examines the sequence at s[i]: returns its length if valid; otherwise sets *valid_prefix to
// the length of the longest valid prefix (>= 1: at least the offending byte is consumed) and
// *truncated if the prefix reached the end of the input.
inline size_t examine(std::string_view s, size_t i, size_t* bad_len, bool* truncated) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  unsigned char b = p[i];
  LeadInfo li = lead_info(b);
  *truncated = false;
  if (li.cont == 0) return 1;
  if (li.cont == 0xFF) {
    *bad_len = 1;
    return 0;
  }
  size_t k = 1;
  for (; k <= li.cont; ++k) {
    if (i + k >= n) {
      *bad_len = k;
      *truncated = true;
      return 0;
    }
    unsigned char c = p[i + k];
    unsigned char lo = k == 1 ? li.lo : 0x80;
    unsigned char hi = k == 1 ? li.hi : 0xBF;
    if (c < lo || c > hi) {
      *bad_len = k;
      return 0;
    }
  }
  return k;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  size_t bad = 0;
  bool trunc = false;
  return examine(s, i, &bad, &trunc);
}

size_t find_invalid(std::string_view s) {
  // SIMD check first (simdjson, several GB/s); the scalar scan only runs to locate an error.
  if (simdjson::validate_utf8(s.data(), s.size())) return std::string_view::npos;
  size_t i = 0, n = s.size();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t bad = 0;
    bool trunc = false;
    size_t len = examine(s, i, &bad, &trunc);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

Status validate(std::string_view s, std::string_view what) {
  size_t at = find_invalid(s);
  if (at == std::string_view::npos) return Status::ok();
  return invalid_argument(std::string(what) + " is not valid UTF-8 (byte offset " +
                          std::to_string(at) + ")");
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t append_lossy(std::string& out, std::string_view s, bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t i = 0, n = s.size();
  size_t run_start = 0;  // start of the pending run of valid bytes
  while (i < n) {
    size_t bad = 0;
    bool trunc = false;
    size_t len = examine(s, i, &bad, &trunc);
    if (len != 0) {
      i += len;
      continue;
    }
    out.append(s.data() + run_start, i - run_start);
    if (trunc && !final) return n - i;  // keep the incomplete tail for the next call
    out.append(kReplacement);
    i += bad;
    run_start = i;
  }
  out.append(s.data() + run_start, n - run_start);
  return 0;
}

}  // namespace fathom::utf8
