// TokenTable: what the grammar engine needs to know about a vocabulary: the bytes each token id
// stands for (its ByteLevel decoding), which ids may appear inside a grammar (never added or
// special tokens, never ids whose bytes are empty), the stop ids that end a grammar, and a
// byte trie over the usable tokens in depth-first order, which the mask computation walks.
//
// Tokens longer than 65,535 bytes, or a 256th token with the same bytes as others, are
// treated as unusable. Build one per tokenizer and share it; it is immutable and safe to read from
// any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace fathom {
class Tokenizer;
}

namespace fathom::grammar {

class TokenTable {
 public:
  // 12 bytes, so the precomputation's walk over all nodes streams little memory.
  struct TrieNode {
    uint8_t byte;
    uint8_t tok_count;  // tokens whose bytes end here: sorted()[sub_begin, sub_begin + count)
    uint16_t depth;     // length of the prefix this node stands for (>= 1)
    int32_t end;        // one past the last node of this node's subtree
    int32_t sub_begin;  // first token (rank) in this node's subtree; tokens ending here first
  };
  // One past the last token (rank) in the subtree of trie()[i].
  int32_t sub_end(size_t i) const {
    const size_t e = size_t(trie_[i].end);
    return e < trie_.size() ? trie_[e].sub_begin : int32_t(sorted_.size());
  }

  // vocab_size: size of the model's logits row (0: the tokenizer's); stop_ids: the ids that
  // end the output once the grammar is complete (empty: none); symbol_ids: special tokens a
  // grammar may ask for by id (at most kMaxSymbols): symbol_ids[i] stands for the one byte
  // symbol_byte(i), a byte valid UTF-8 never contains, so no ordinary token's text can stand
  // in for it (ordinary tokens holding such bytes are unusable: they are never valid text).
  static Result<std::shared_ptr<const TokenTable>> create(const Tokenizer& tokenizer,
                                                          size_t vocab_size,
                                                          std::vector<int32_t> stop_ids,
                                                          std::vector<int32_t> symbol_ids = {});
  static constexpr int kMaxSymbols = 8;
  static constexpr uint8_t symbol_byte(int i) { return uint8_t(0xF8 + i); }
  // From raw token bytes, index = id; an empty string marks an id that is never allowed.
  static Result<std::shared_ptr<const TokenTable>> from_bytes(std::vector<std::string> bytes,
                                                              size_t vocab_size,
                                                              std::vector<int32_t> stop_ids);

  size_t vocab_size() const { return vocab_size_; }
  // uint32 words in a mask: ceil(vocab_size / 32).
  size_t mask_words() const { return (vocab_size_ + 31) / 32; }
  std::string_view bytes(int32_t id) const {
    return id >= 0 && size_t(id) < bytes_.size() ? std::string_view(bytes_[id]) : "";
  }
  bool usable(int32_t id) const { return id >= 0 && size_t(id) < usable_.size() && usable_[id]; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  // Usable ids sorted by their bytes, and each id's index in that order (-1 if unusable).
  const std::vector<int32_t>& sorted() const { return sorted_; }
  int32_t rank(int32_t id) const { return rank_[id]; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  // Bitmask of the usable ids.
  const std::vector<uint32_t>& usable_mask() const { return usable_mask_; }
  size_t max_token_len() const { return max_len_; }
  // The usable token with the longest bytes that `bytes` starts with, and their length
  // ({-1, 0}: none).
  std::pair<int32_t, size_t> longest_prefix(std::string_view bytes) const;
  // Identifies the vocabulary (bytes, size and stop ids), for cache keys.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  TokenTable() = default;
  void build();

  size_t vocab_size_ = 0;
  size_t max_len_ = 0;
  uint64_t fingerprint_ = 0;
  std::vector<std::string> bytes_;
  std::vector<bool> usable_;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> sorted_;
  std::vector<int32_t> rank_;
  std::vector<TrieNode> trie_;
  std::vector<uint32_t> usable_mask_;
};

}  // namespace fathom::grammar
