// Writing JSON text by hand on hot output paths (token id lists, decoded text), where
// building a DOM would cost more than the work itself. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace fathom::json {

// Appends `s` as a JSON string literal (with quotes). Control characters, U+2028/U+2029
// and U+0085 are written as \u escapes; other non-ASCII is kept as UTF-8. REQUIRES: s is
// valid UTF-8.
void append_string(std::string& out, std::string_view s);

// Appends "[1,2,3]".
void append_int_array(std::string& out, std::span<const int32_t> values);

}  // namespace fathom::json
