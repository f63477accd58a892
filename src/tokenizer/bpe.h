// BpeModel: byte-level BPE over raw bytes. Holds the vocabulary (raw bytes -> id), the
// merge table ((left id, right id) -> rank, merged id) and the byte -> id map, and turns one
// pre-token into ids exactly as Hugging Face `tokenizers` does: repeatedly merge the
// adjacent pair with the lowest rank, leftmost first. Immutable after build(); encode_word()
// may be called from many threads at once, each with its own BpeWordCache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/flat_maps.h"

namespace fathom::tok {

// Caches the ids of recently seen words. One per thread; bounded in memory.
class BpeWordCache {
 public:
  explicit BpeWordCache(size_t max_entries = 1 << 18) : max_entries_(max_entries) {}
  // Returns true and appends the cached ids if `word` is cached.
  bool lookup(std::string_view word, uint64_t h, std::vector<int32_t>& out) const;
  void store(std::string_view word, uint64_t h, const int32_t* ids, size_t n);
  void clear();

  static constexpr size_t kMaxWordBytes = 96;  // longer words are not cached

 private:
  FlatStringMap map_{1024};
  std::vector<int32_t> ids_;
  size_t max_entries_;
};

struct BpeOptions {
  bool ignore_merges = false;  // a word that is a vocabulary entry is emitted whole
};

class BpeModel {
 public:
  // vocab: (token as written in the byte-level alphabet, id); merges: (left, right) tokens
  // in rank order. Every merge operand and result must be in the vocabulary.
  static Result<std::unique_ptr<BpeModel>> build(
      const std::vector<std::pair<std::string_view, int32_t>>& vocab,
      const std::vector<std::pair<std::string_view, std::string_view>>& merges, BpeOptions options);

  // Appends the ids of one pre-token (raw bytes). Bytes that have no vocabulary entry are
  // dropped, as HF does without an unk token.
  void encode_word(std::string_view word, std::vector<int32_t>& out, BpeWordCache* cache) const;

  // The reference algorithm (a plain O(n^2) loop, no cache); encode_word must agree with it.
  void encode_word_reference(std::string_view word, std::vector<int32_t>& out) const;

  // Id of a vocabulary entry given as raw bytes, or -1.
  int32_t id_of_bytes(std::string_view bytes) const {
    const auto* v = vocab_.find(bytes);
    return v ? static_cast<int32_t>(v->a) : -1;
  }
  // Raw bytes of every vocabulary id (empty string for unused ids); index = id.
  const std::vector<std::string>& id_bytes() const { return id_bytes_; }
  // Whether the id's token was written entirely in the byte-level alphabet.
  bool id_is_byte_level(int32_t id) const {
    return id >= 0 && size_t(id) < is_byte_level_.size() && is_byte_level_[id];
  }
  const std::vector<std::string>& id_spelling() const { return id_spelling_; }
  size_t vocab_size() const { return vocab_.size(); }
  size_t merge_count() const { return merges_.size(); }

 private:
  BpeModel() = default;
  void merge_small(int32_t* ids, size_t n, std::vector<int32_t>& out) const;
  void merge_large(int32_t* ids, size_t n, std::vector<int32_t>& out) const;

  FlatStringMap vocab_;  // raw bytes -> id (in .a)
  FlatPairMap merges_;
  int32_t byte_id_[256];
  std::vector<std::string> id_bytes_;
  std::vector<std::string> id_spelling_;
  std::vector<bool> is_byte_level_;
  BpeOptions options_;
};

}  // namespace fathom::tok
