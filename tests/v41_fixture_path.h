// Where the tests find the DeepSeek V4.1 tokenizer fixture that scripts/setup.sh builds:
// $FATHOM_V41_TOKENIZER_JSON, else $FATHOM_CACHE (default ~/.cache/fathom)
// /tokenizers/deepseek_v41_fixture/tokenizer.json.
#pragma once

#include <cstdlib>
#include <string>

namespace fathom::test {

inline std::string v41_fixture_path() {
  if (const char* p = std::getenv("FATHOM_V41_TOKENIZER_JSON")) return p;
  const char* c = std::getenv("FATHOM_CACHE");
  const char* h = std::getenv("HOME");
  const std::string cache = c ? c : std::string(h ? h : "/root") + "/.cache/fathom";
  return cache + "/tokenizers/deepseek_v41_fixture/tokenizer.json";
}

}  // namespace fathom::test
