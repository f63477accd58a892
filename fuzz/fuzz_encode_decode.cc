// Fuzzes encoding and decoding with DeepSeek's tokenizer ($FATHOM_TOKENIZER_JSON or the
// setup cache), differentially: the hand-written pre-tokenizer and the PCRE2 path must give
// the same ids, sequential and parallel encoding must agree, decode(encode(text)) must be
// the text, and the streaming decoder must equal decode() on arbitrary ids.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string tokenizer_path() {
  if (const char* p = std::getenv("FATHOM_TOKENIZER_JSON")) return p;
  const char* c = std::getenv("FATHOM_CACHE");
  const char* h = std::getenv("HOME");
  std::string cache = c ? c : std::string(h ? h : "/root") + "/.cache/fathom";
  return cache + "/tokenizers/deepseek_v3/tokenizer.json";
}

struct Fixture {
  std::unique_ptr<fathom::Tokenizer> fast, slow;
  fathom::ThreadPool pool{2};
  Fixture() {
    auto f = fathom::Tokenizer::load_file(tokenizer_path());
    auto s = fathom::Tokenizer::load_file(tokenizer_path(), {.fast_pre_tokenizer = false});
    if (!f.is_ok() || !s.is_ok()) {
      std::fprintf(stderr, "cannot load %s\n", tokenizer_path().c_str());
      std::abort();
    }
    fast = std::move(f).value();
    slow = std::move(s).value();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fx = new Fixture();
  std::string text(reinterpret_cast<const char*>(data), size);
  auto a = fx->fast->encode(text);
  auto b = fx->slow->encode(text);
  if (a.is_ok() != fathom::utf8::is_valid(text) || a.is_ok() != b.is_ok()) std::abort();
  if (a.is_ok()) {
    if (*a != *b) std::abort();
    auto plain = fx->fast->encode_plain(text);
    if (!plain.is_ok() || *plain != *fx->slow->encode_plain(text)) std::abort();
    for (int32_t id : *plain)
      if (fx->fast->is_added(id)) std::abort();
    if (*fx->fast->decode(*a) != text || *fx->fast->decode(*plain) != text) std::abort();
    // Now and then the parallel path, on the input repeated past its size threshold.
    if (size > 16 && (data[0] & 31) == 0) {
      std::string big;
      while (big.size() < 140000) big += text;
      while (!fathom::utf8::is_valid(big)) big.pop_back();
      if (*fx->fast->encode(big, {}, &fx->pool) != *fx->fast->encode(big)) std::abort();
    }
  }
  // Arbitrary ids: decode and stream-decode agree (or both reject).
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 < size && ids.size() < 256; i += 3) {
    ids.push_back(int32_t((data[i] | (data[i + 1] << 8) | (data[i + 2] << 16)) % 129000));
  }
  auto whole = fx->fast->decode(ids);
  fathom::StreamDecoder dec(*fx->fast);
  std::string streamed;
  bool ok = true;
  for (int32_t id : ids) {
    std::string delta;
    if (!dec.push(id, delta).is_ok()) {
      ok = false;
      break;
    }
    if (!fathom::utf8::is_valid(delta)) std::abort();
    streamed += delta;
  }
  dec.finish(streamed);
  if (ok != whole.is_ok()) std::abort();
  if (ok && streamed != *whole) std::abort();
  return 0;
}
