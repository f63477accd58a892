// The GPT-2 byte-level alphabet: the bijection between the 256 byte values and 256
// printable code points that byte-level BPE vocabularies are written in. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fathom::tok::byte_level {

// The code point that stands for byte b.
uint32_t char_of_byte(uint8_t b);
// The byte that code point cp stands for, or -1 if cp is not in the alphabet.
int byte_of_char(uint32_t cp);

// Converts a vocabulary token written in the alphabet to raw bytes. Returns false (and
// leaves *out unspecified) if some character is outside the alphabet.
bool token_to_bytes(std::string_view token, std::string* out);
// Writes raw bytes in the alphabet.
std::string bytes_to_token(std::string_view bytes);

}  // namespace fathom::tok::byte_level
