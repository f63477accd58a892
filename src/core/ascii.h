// ASCII helpers for protocol text (HTTP header names, schemes, codings): locale-free, so a
// server's behaviour does not depend on the process's locale. Pure functions; thread-safe.
#pragma once

#include <string_view>

namespace fathom::ascii {

constexpr char to_lower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }
constexpr char to_upper(char c) { return c >= 'a' && c <= 'z' ? char(c - 'a' + 'A') : c; }
constexpr bool is_hex_digit(char c) {
  return (c >= '0' && c <= '9') || (to_lower(c) >= 'a' && to_lower(c) <= 'f');
}

// Equal but for the case of ASCII letters.
constexpr bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  return true;
}

}  // namespace fathom::ascii
