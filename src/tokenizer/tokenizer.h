// Tokenizer: a byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, giving
// exactly the ids HF `tokenizers` gives (normalizer -> added tokens -> pre-tokenizer -> BPE
// -> post-processor), and decoding ids back to text the way HF's ByteLevel decoder does.
//
// Two encodings: encode() matches added-token spellings in the text, as HF does; and
// encode_plain() never does, so no user-supplied text can turn into a control token (the
// path all untrusted content takes). Special tokens are found by spelling with id_of().
//
// A Tokenizer is immutable once loaded and safe to use from any number of threads at once;
// per-call working memory comes from an internal pool. Errors are Status values.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom {

class ThreadPool;

namespace tok {
struct AddedToken;
}

struct TokenizerLoadOptions {
  // Use the hand-written pre-tokenizer when the file's pre-tokenizer is DeepSeek's (false:
  // always the general PCRE2 path; for testing one against the other).
  bool fast_pre_tokenizer = true;
};

struct EncodeOptions {
  bool match_added_tokens = true;   // false: encode_plain semantics
  bool add_special_tokens = false;  // apply the post-processor's template (BOS/EOS etc.)
};

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> load_file(const std::string& path,
                                                      TokenizerLoadOptions options = {});
  static Result<std::unique_ptr<Tokenizer>> load_json(std::string_view json,
                                                      TokenizerLoadOptions options = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes one text. With a pool, a long text is cut at points where the pre-tokenizer
  // promises identical pieces and the parts are encoded in parallel; the ids are the same.
  // Fails with kInvalidArgument if the text is not valid UTF-8.
  Result<std::vector<int32_t>> encode(std::string_view text, EncodeOptions options = {},
                                      ThreadPool* pool = nullptr) const;
  Result<std::vector<int32_t>> encode_plain(std::string_view text,
                                            ThreadPool* pool = nullptr) const {
    return encode(text, EncodeOptions{.match_added_tokens = false}, pool);
  }
  // Appends the plain (no added-token matching) ids of `text` to `out`.
  Status encode_plain_into(std::string_view text, std::vector<int32_t>& out) const;

  // Encodes many texts, in parallel over the pool's threads; results are in input order.
  Result<std::vector<std::vector<int32_t>>> encode_batch(std::span<const std::string_view> texts,
                                                         EncodeOptions options = {},
                                                         ThreadPool* pool = nullptr) const;

  // Joins the bytes of every token and converts them to UTF-8 once, each maximal invalid
  // sequence becoming U+FFFD (HF's ByteLevel decoder). skip_special drops added tokens
  // marked special. Fails with kOutOfRange for an id the tokenizer does not have.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Id of a token by spelling: added tokens by content, vocabulary entries as written in
  // tokenizer.json. -1 if there is none.
  int32_t id_of(std::string_view spelling) const;
  // The raw bytes id decodes to (empty for an unknown id).
  std::string_view token_bytes(int32_t id) const;
  // The token as tokenizer.json spells it (HF's id_to_token, vLLM's token_strs): an added
  // token's content, else the vocabulary entry as written (empty for an unknown id).
  std::string_view spelling(int32_t id) const;
  bool is_added(int32_t id) const;
  bool is_special(int32_t id) const;
  // One past the largest id.
  size_t vocab_size() const;
  const std::vector<tok::AddedToken>& added_tokens() const;
  // Whether the fast DeepSeek pre-tokenizer is in use.
  bool uses_fast_pre_tokenizer() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class StreamDecoder;
};

// StreamDecoder: turns ids into text incrementally, never emitting a broken UTF-8 sequence:
// bytes of an incomplete character are held until it completes (or turns out invalid and
// becomes U+FFFD). The concatenation of everything push() and finish() append equals
// decode() of all ids. One per stream; not thread-safe. The Tokenizer must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tok_(tokenizer), skip_special_(skip_special) {}
  // Appends the text that id completes to out. kOutOfRange for an unknown id.
  Status push(int32_t id, std::string& out);
  // Appends what is still held (as U+FFFD) and resets.
  void finish(std::string& out);

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace fathom
