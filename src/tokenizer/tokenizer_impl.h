// Internal: the pieces a loaded Tokenizer is made of, shared by the loader
// (tokenizer_json.cc) and the encode/decode paths (tokenizer.cc). Not a public header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace fathom {

// Per-call working memory, pooled so steady-state encoding does not allocate.
struct EncodeScratch {
  tok::PreTokenizeScratch pre;
  tok::BpeWordCache cache;
  std::vector<tok::Segment> segments, sub_segments;
  std::vector<std::string_view> pieces;
  std::string normalized;
};

// What the post-processor adds with add_special_tokens: ids before and after the text.
struct SpecialTemplate {
  std::vector<int32_t> prefix, suffix;
};

struct Tokenizer::Impl {
  std::unique_ptr<tok::BpeModel> bpe;
  tok::AddedVocabulary added;
  std::unique_ptr<tok::Normalizer> normalizer;          // null: none
  std::unique_ptr<tok::PreTokenizer> pre;               // null: the whole text is one piece
  const tok::DeepSeekPreTokenizer* fast_pre = nullptr;  // set when `pre` is the fast one
  SpecialTemplate special_template;
  bool byte_level_decoder = true;  // false: HF's no-decoder behaviour (join with spaces)

  // Decoding tables, index = id.
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> id_kind;  // 0 unknown, 1 vocabulary, 2 added, 3 added special
  size_t vocab_size = 0;

  // Identifies this tokenizer among all ever loaded, for the per-thread scratch slots.
  uint64_t serial = 0;

  // Working memory for the calling thread, reused across calls so its word cache stays hot
  // and on this core. A thread keeps slots for its few most recently used tokenizers.
  EncodeScratch& scratch() const;

  // Encoding stages (tokenizer.cc).
  Status encode_segment(std::string_view text, bool match_added, std::vector<int32_t>& out,
                        EncodeScratch& s) const;
  void pre_tokenize_and_bpe(std::string_view text, std::vector<int32_t>& out,
                            EncodeScratch& s) const;
};

Result<std::unique_ptr<Tokenizer::Impl>> load_tokenizer_json(std::string_view json,
                                                             const TokenizerLoadOptions& options);

}  // namespace fathom
