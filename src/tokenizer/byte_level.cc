#include "tokenizer/byte_level.h"

#include <array>

#include "core/utf8.h"

namespace fathom::tok::byte_level {
namespace {

struct Alphabet {
  std::array<uint32_t, 256> char_of{};
  std::array<int16_t, 512> byte_of{};  // every alphabet code point is below 0x144
  Alphabet() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char_of[b] = printable ? uint32_t(b) : next++;
      byte_of[char_of[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

uint32_t char_of_byte(uint8_t b) { return alphabet().char_of[b]; }

int byte_of_char(uint32_t cp) { return cp < 512 ? alphabet().byte_of[cp] : -1; }

bool token_to_bytes(std::string_view token, std::string* out) {
  out->clear();
  if (!utf8::is_valid(token)) return false;
  const Alphabet& a = alphabet();
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    uint32_t cp = utf8::decode_at(token, i, &len);
    if (cp >= 512 || a.byte_of[cp] < 0) return false;
    out->push_back(static_cast<char>(a.byte_of[cp]));
    i += len;
  }
  return true;
}

std::string bytes_to_token(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) utf8::append(out, alphabet().char_of[b]);
  return out;
}

}  // namespace fathom::tok::byte_level
