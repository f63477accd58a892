// AddedVocabulary: the tokenizer.json "added_tokens" (special and control tokens) and the
// matching of their spellings in input text, exactly as HF's AddedVocabulary does it:
// leftmost-longest over all spellings, honouring single_word, lstrip and rstrip; tokens with
// normalized=false match the raw text, the others the normalized text. Immutable after
// build(); safe to use from many threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace fathom::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A piece of input: either text still to be tokenized, or one added token's id.
struct Segment {
  std::string_view text;
  int32_t token_id = -1;  // >= 0: this segment is that added token
};

// Leftmost-longest multi-string matcher (a byte trie with a first-byte filter).
class SpellingMatcher {
 public:
  void add(std::string_view spelling, int32_t index);
  // Finds the leftmost match at or after pos, the longest one there.
  bool find(std::string_view s, size_t pos, size_t* start, size_t* end, int32_t* index) const;
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    int32_t terminal = -1;
    std::vector<std::pair<uint8_t, int32_t>> next;
  };
  std::vector<Node> nodes_{Node{}};
  bool first_[256] = {};
  int distinct_first_ = 0;
  int single_first_ = -1;  // the only byte any spelling starts with, or -1
};

class AddedVocabulary {
 public:
  // `normalized_spellings[i]` is tokens[i].content after the tokenizer's normalizer (only
  // read for tokens with normalized=true).
  static Result<AddedVocabulary> build(std::vector<AddedToken> tokens,
                                       const std::vector<std::string>& normalized_spellings);
  AddedVocabulary() = default;

  // Splits `text` on the added tokens of one set (raw: normalized=false tokens; otherwise
  // the normalized=true ones), appending text and token segments in order.
  void split(std::string_view text, bool normalized_set, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // The added token with this id, or nullptr.
  const AddedToken* by_id(int32_t id) const;
  // Id of the added token spelled `content`, or -1.
  int32_t id_of(std::string_view content) const;
  bool has_normalized_tokens() const { return !normalized_.empty(); }
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  SpellingMatcher raw_, normalized_;
};

}  // namespace fathom::tok
