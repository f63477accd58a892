// Internal: the pieces a loaded Tokenizer is made of, shared by the loader
// (tokenizer_json.cc) and the encode/decode paths (tokenizer.cc). Not a public header.
#pragma once

#include <memory>
#include <mutex>
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
  std::unique_ptr<tok::Normalizer> normalizer;  // null: none
  std::unique_ptr<tok::PreTokenizer> pre;       // null: the whole text is one piece
  const tok::DeepSeekPreTokenizer* fast_pre = nullptr;  // set when `pre` is the fast one
  SpecialTemplate special_template;
  bool byte_level_decoder = true;  // false: HF's no-decoder behaviour (join with spaces)

  // Decoding tables, index = id.
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> id_kind;  // 0 unknown, 1 vocabulary, 2 added, 3 added special
  size_t vocab_size = 0;

  std::mutex scratch_mu;
  std::vector<std::unique_ptr<EncodeScratch>> scratch_pool;  // guarded by scratch_mu

  std::unique_ptr<EncodeScratch> acquire() {
    {
      std::lock_guard<std::mutex> lock(scratch_mu);
      if (!scratch_pool.empty()) {
        auto s = std::move(scratch_pool.back());
        scratch_pool.pop_back();
        return s;
      }
    }
    return std::make_unique<EncodeScratch>();
  }
  void release(std::unique_ptr<EncodeScratch> s) {
    std::lock_guard<std::mutex> lock(scratch_mu);
    if (scratch_pool.size() < 64) scratch_pool.push_back(std::move(s));
  }

  // Encoding stages (tokenizer.cc).
  Status encode_segment(std::string_view text, bool match_added, std::vector<int32_t>& out,
                        EncodeScratch& s) const;
  void pre_tokenize_and_bpe(std::string_view text, std::vector<int32_t>& out,
                            EncodeScratch& s) const;
};

Result<std::unique_ptr<Tokenizer::Impl>> load_tokenizer_json(std::string_view json,
                                                             const TokenizerLoadOptions& options);

}  // namespace fathom
