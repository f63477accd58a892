// PromptEncoder: Prompt -> token ids. Special pieces become their ids, looked up by
// spelling in the loaded tokenizer (never hard-coded); every text piece goes through plain
// BPE (Tokenizer::encode_plain), so no text — user, system, tool result, arguments,
// reasoning — can become a control token. Text pieces are encoded in parallel on a pool.
// Immutable after create(); safe to share between threads. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "prompt/prompt.h"
#include "tokenizer/tokenizer.h"

namespace fathom {
class ThreadPool;
}

namespace fathom::prompt {

class PromptEncoder {
 public:
  // Fails with kNotFound if the tokenizer lacks one of the control tokens a V4/V4.1 prompt
  // can contain (except those listed as optional: <｜System｜> is V4.1-only, the image
  // placeholder vision-only).
  static Result<PromptEncoder> create(const Tokenizer& tokenizer);

  Result<std::vector<int32_t>> encode(const Prompt& prompt, ThreadPool* pool = nullptr) const;
  // Id of a control spelling, or -1.
  int32_t special_id(std::string_view spelling) const;

 private:
  explicit PromptEncoder(const Tokenizer& t) : tok_(&t) {}
  const Tokenizer* tok_;
  std::unordered_map<std::string, int32_t> specials_;
};

}  // namespace fathom::prompt
