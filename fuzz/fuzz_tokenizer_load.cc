// Fuzzes tokenizer.json loading: any input must load or fail with a Status, and a tokenizer
// that loads must encode and decode without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tok = fathom::Tokenizer::load_json(json);
  if (!tok.is_ok()) return 0;
  const fathom::Tokenizer& t = **tok;
  for (std::string_view text : {"hello world 123", "<s> x</s>  \n\t", "中文 😀 é"}) {
    auto ids = t.encode(text, {.add_special_tokens = true});
    if (ids.is_ok()) (void)t.decode(*ids, true);
    (void)t.encode_plain(text);
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size && ids.size() < 64; i += 2)
    ids.push_back(data[i] | (data[i + 1] << 8));
  (void)t.decode(ids);
  return 0;
}
