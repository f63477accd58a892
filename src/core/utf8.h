// UTF-8 helpers: strict validation, decoding, encoding, and lossy conversion that replaces
// each maximal invalid subsequence with U+FFFD (the Unicode "maximal subpart" practice, as
// Rust's from_utf8_lossy and Python's errors="replace" do). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom::utf8 {

// Returns the byte offset of the first invalid sequence, or npos if `s` is valid UTF-8
// (no overlongs, no surrogates, nothing above U+10FFFF).
size_t find_invalid(std::string_view s);
inline bool is_valid(std::string_view s) { return find_invalid(s) == std::string_view::npos; }
// OK, or kInvalidArgument naming the byte offset of the first invalid sequence.
Status validate(std::string_view s, std::string_view what = "text");

// Length of the valid sequence starting at s[i], or 0 if none starts there.
size_t valid_sequence_length(std::string_view s, size_t i);

// Decodes the code point at s[i]. REQUIRES: s is valid UTF-8 and i < s.size() is a
// character boundary. Sets *len to the sequence length.
inline uint32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  unsigned char b = p[0];
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  if (b < 0xE0) {
    *len = 2;
    return (uint32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b < 0xF0) {
    *len = 3;
    return (uint32_t(b & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *len = 4;
  return (uint32_t(b & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
}

// Appends the UTF-8 encoding of cp (REQUIRES: a scalar value) to out.
void append(std::string& out, uint32_t cp);

// Appends `bytes` to out with invalid sequences replaced by U+FFFD. If `final` is false, an
// incomplete but so-far-valid sequence at the end is not converted; its length is returned
// so the caller can keep those bytes for the next call. Returns 0 when final.
size_t append_lossy(std::string& out, std::string_view bytes, bool final);

inline std::string to_lossy(std::string_view bytes) {
  std::string out;
  append_lossy(out, bytes, true);
  return out;
}

}  // namespace fathom::utf8
