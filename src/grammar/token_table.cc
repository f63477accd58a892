#include "grammar/token_table.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace fathom::grammar {

Result<std::shared_ptr<const TokenTable>> TokenTable::create(const Tokenizer& tokenizer,
                                                             size_t vocab_size,
                                                             std::vector<int32_t> stop_ids,
                                                             std::vector<int32_t> symbol_ids) {
  const size_t n = tokenizer.vocab_size();
  if (symbol_ids.size() > size_t(kMaxSymbols))
    return invalid_argument("at most " + std::to_string(kMaxSymbols) + " symbol ids");
  std::vector<std::string> bytes(n);
  for (size_t id = 0; id < n; ++id) {
    if (tokenizer.is_added(int32_t(id)) || tokenizer.is_special(int32_t(id))) continue;
    std::string b(tokenizer.token_bytes(int32_t(id)));
    if (std::any_of(b.begin(), b.end(), [](char c) { return uint8_t(c) >= symbol_byte(0); }))
      continue;  // never valid UTF-8; the symbols' bytes
    bytes[id] = std::move(b);
  }
  for (size_t i = 0; i < symbol_ids.size(); ++i) {
    const int32_t id = symbol_ids[i];
    if (id < 0 || size_t(id) >= n)
      return out_of_range("symbol id " + std::to_string(id) + " is outside the vocabulary");
    bytes[size_t(id)] = std::string(1, char(symbol_byte(int(i))));
  }
  return from_bytes(std::move(bytes), vocab_size == 0 ? n : vocab_size, std::move(stop_ids));
}

Result<std::shared_ptr<const TokenTable>> TokenTable::from_bytes(std::vector<std::string> bytes,
                                                                 size_t vocab_size,
                                                                 std::vector<int32_t> stop_ids) {
  if (vocab_size < bytes.size()) {
    return invalid_argument("vocab_size " + std::to_string(vocab_size) +
                            " is smaller than the tokenizer's " + std::to_string(bytes.size()));
  }
  for (int32_t id : stop_ids) {
    if (id < 0 || size_t(id) >= vocab_size) {
      return out_of_range("stop id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  std::shared_ptr<TokenTable> t(new TokenTable());
  t->vocab_size_ = vocab_size;
  t->bytes_ = std::move(bytes);
  t->stop_ids_ = std::move(stop_ids);
  t->build();
  return std::shared_ptr<const TokenTable>(std::move(t));
}

void TokenTable::build() {
  const size_t n = bytes_.size();
  usable_.assign(n, false);
  rank_.assign(n, -1);
  usable_mask_.assign(mask_words(), 0);
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  mix(vocab_size_);
  for (size_t id = 0; id < n; ++id) {
    for (char c : bytes_[id]) mix(uint8_t(c));
    mix(0x100 + bytes_[id].size());
    if (bytes_[id].empty() || bytes_[id].size() > 65535) continue;
    usable_[id] = true;
    sorted_.push_back(int32_t(id));
    usable_mask_[id / 32] |= 1u << (id % 32);
    max_len_ = std::max(max_len_, bytes_[id].size());
  }
  for (int32_t s : stop_ids_) mix(0x10000 + uint64_t(s));
  fingerprint_ = h;
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b;
  });
  for (size_t i = 0; i < sorted_.size(); ++i) rank_[sorted_[i]] = int32_t(i);

  // Trie in depth-first order: path[d] is the node at depth d + 1 on the current path.
  std::vector<int32_t> path;
  std::string_view prev;
  std::vector<int32_t> kept;
  for (size_t i = 0; i < sorted_.size(); ++i) {
    std::string_view cur = bytes_[sorted_[i]];
    size_t l = 0;
    while (l < prev.size() && l < cur.size() && prev[l] == cur[l]) ++l;
    if (l == cur.size() && l == prev.size() && trie_[path.back()].tok_count == 255) {
      // A 256th duplicate: unusable.
      usable_[sorted_[i]] = false;
      usable_mask_[sorted_[i] / 32] &= ~(1u << (sorted_[i] % 32));
      continue;
    }
    while (path.size() > l) {
      trie_[path.back()].end = int32_t(trie_.size());
      path.pop_back();
    }
    const int32_t rank = int32_t(kept.size());
    for (size_t d = l; d < cur.size(); ++d) {
      trie_.push_back(TrieNode{uint8_t(cur[d]), 0, uint16_t(d + 1), 0, rank});
      path.push_back(int32_t(trie_.size() - 1));
    }
    ++trie_[path.back()].tok_count;
    kept.push_back(sorted_[i]);
    prev = cur;
  }
  while (!path.empty()) {
    trie_[path.back()].end = int32_t(trie_.size());
    path.pop_back();
  }
  sorted_ = std::move(kept);
  std::fill(rank_.begin(), rank_.end(), -1);
  for (size_t i = 0; i < sorted_.size(); ++i) rank_[sorted_[i]] = int32_t(i);
}

std::pair<int32_t, size_t> TokenTable::longest_prefix(std::string_view bytes) const {
  // The trie in depth-first order: a node's children start right after it, its next sibling
  // at its `end`.
  std::pair<int32_t, size_t> best{-1, 0};
  size_t i = 0, lim = trie_.size();
  for (size_t depth = 0; depth < bytes.size();) {
    while (i < lim && trie_[i].byte != uint8_t(bytes[depth])) i = size_t(trie_[i].end);
    if (i >= lim) break;
    ++depth;
    if (trie_[i].tok_count > 0) best = {sorted_[size_t(trie_[i].sub_begin)], depth};
    lim = size_t(trie_[i].end);
    ++i;
  }
  return best;
}

}  // namespace fathom::grammar
