#include "serve/logit_controls.h"

#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace fathom {

namespace {

// Python's str.isspace() for one code point.
bool unicode_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace

std::string_view lstrip_unicode_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const uint32_t c = utf8::decode_at(s, i, &len);
    if (len == 0 || !unicode_space(c)) break;
    i += len;
  }
  return s.substr(i);
}

Status apply_logit_controls(const api::SamplingParams& s, const Tokenizer& tok,
                            engine::GenerationRequest* g) {
  g->logit_bias.clear();
  for (const auto& [id, bias] : s.logit_bias) g->logit_bias.emplace_back(id, float(bias));
  g->allowed_token_ids = s.allowed_token_ids;
  g->min_tokens = s.min_tokens;
  g->bad_words = s.bad_words_ids;
  g->bad_words_from_ids = s.bad_words_ids.size();
  g->bad_words_text = s.bad_words;
  // vLLM's rule: the word (leading spaces dropped) and, when it tokenizes to as many ids
  // starting with another one, the word after a space (as it reads inside a text).
  for (const std::string& word : s.bad_words) {
    const std::string_view w = lstrip_unicode_space(word);
    Result<std::vector<int32_t>> plain = tok.encode(w);
    if (!plain.is_ok()) return plain.status();
    if (plain->empty())
      return invalid_argument("'bad_words' entries must tokenize to at least one token");
    Result<std::vector<int32_t>> spaced = tok.encode(" " + std::string(w));
    if (!spaced.is_ok()) return spaced.status();
    const bool other =
        !spaced->empty() && spaced->front() != plain->front() && spaced->size() == plain->size();
    g->bad_words.push_back(std::move(*plain));
    if (other) g->bad_words.push_back(std::move(*spaced));
  }
  return Status::ok();
}

}  // namespace fathom
