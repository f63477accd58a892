#include "tokenizer/bpe.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "tokenizer/byte_level.h"

namespace fathom::tok {
namespace {
constexpr uint32_t kNoMerge = std::numeric_limits<uint32_t>::max();
}

bool BpeWordCache::lookup(std::string_view word, uint64_t h, std::vector<int32_t>& out) const {
  const auto* v = map_.find(word, h);
  if (v == nullptr) return false;
  out.insert(out.end(), ids_.begin() + v->a, ids_.begin() + v->a + v->b);
  return true;
}

void BpeWordCache::store(std::string_view word, uint64_t h, const int32_t* ids, size_t n) {
  if (map_.size() >= max_entries_) return;
  map_.insert(word, h, {static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)});
  ids_.insert(ids_.end(), ids, ids + n);
}

void BpeWordCache::clear() {
  map_ = FlatStringMap(1024);
  ids_.clear();
}

Result<std::unique_ptr<BpeModel>> BpeModel::build(
    const std::vector<std::pair<std::string_view, int32_t>>& vocab,
    const std::vector<std::pair<std::string_view, std::string_view>>& merges, BpeOptions options) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->options_ = options;
  m->vocab_ = FlatStringMap(vocab.size());
  m->merges_ = FlatPairMap(merges.size());
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab) {
    if (id < 0)
      return corrupt("tokenizer.json: negative vocabulary id for token '" + std::string(tok) + "'");
    max_id = std::max(max_id, id);
  }
  if (max_id >= (1 << 24))
    return corrupt("tokenizer.json: vocabulary id " + std::to_string(max_id) + " is too large");
  m->id_bytes_.assign(size_t(max_id + 1), std::string());
  m->id_spelling_.assign(size_t(max_id + 1), std::string());
  m->is_byte_level_.assign(size_t(max_id + 1), false);
  std::vector<bool> seen(size_t(max_id + 1), false);
  std::string bytes;
  for (const auto& [tok, id] : vocab) {
    if (seen[size_t(id)])
      return corrupt("tokenizer.json: vocabulary id " + std::to_string(id) + " is used twice");
    seen[size_t(id)] = true;
    m->id_spelling_[size_t(id)] = std::string(tok);
    if (byte_level::token_to_bytes(tok, &bytes)) {
      m->is_byte_level_[size_t(id)] = true;
      m->id_bytes_[size_t(id)] = bytes;
      m->vocab_.insert(bytes, {static_cast<uint32_t>(id), 0});
    } else {
      // Not reachable by byte-level BPE; decoded from its UTF-8 spelling, as HF does.
      m->id_bytes_[size_t(id)] = std::string(tok);
    }
  }
  for (int b = 0; b < 256; ++b) {
    char c = static_cast<char>(b);
    m->byte_id_[b] = m->id_of_bytes(std::string_view(&c, 1));
  }
  std::string lb, rb;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [l, r] = merges[rank];
    if (!byte_level::token_to_bytes(l, &lb) || !byte_level::token_to_bytes(r, &rb)) {
      return corrupt("tokenizer.json: merge " + std::to_string(rank) + " ('" + std::string(l) +
                     "', '" + std::string(r) + "') is not in the byte-level alphabet");
    }
    int32_t li = m->id_of_bytes(lb), ri = m->id_of_bytes(rb);
    if (li < 0 || ri < 0) {
      return corrupt("tokenizer.json: merge " + std::to_string(rank) +
                     " uses a token missing from the vocabulary: '" + std::string(li < 0 ? l : r) +
                     "'");
    }
    int32_t merged = m->id_of_bytes(lb + rb);
    if (merged < 0) {
      return corrupt("tokenizer.json: the result of merge " + std::to_string(rank) + " ('" +
                     std::string(l) + std::string(r) + "') is missing from the vocabulary");
    }
    m->merges_.insert(FlatPairMap::key_of(li, ri), {static_cast<uint32_t>(rank), merged});
  }
  return m;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out,
                           BpeWordCache* cache) const {
  size_t n = word.size();
  if (n == 0) return;
  if (n == 1) {
    int32_t id = byte_id_[static_cast<unsigned char>(word[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  uint64_t h = 0;
  bool cacheable = cache != nullptr && n <= BpeWordCache::kMaxWordBytes;
  if (cacheable) {
    h = hash_bytes(word);
    if (cache->lookup(word, h, out)) return;
  }
  if (options_.ignore_merges) {
    const auto* v = cacheable ? vocab_.find(word, h) : vocab_.find(word);
    if (v != nullptr) {
      out.push_back(static_cast<int32_t>(v->a));
      return;
    }
  }
  size_t start = out.size();
  constexpr size_t kSmall = 128;
  int32_t stack_ids[kSmall];
  std::vector<int32_t> heap_ids;
  int32_t* ids = stack_ids;
  if (n > kSmall) {
    heap_ids.resize(n);
    ids = heap_ids.data();
  }
  size_t m = 0;
  for (unsigned char c : word) {
    int32_t id = byte_id_[c];
    if (id >= 0) ids[m++] = id;
  }
  if (m <= kSmall) {
    merge_small(ids, m, out);
  } else {
    merge_large(ids, m, out);
  }
  if (cacheable) cache->store(word, h, out.data() + start, out.size() - start);
}

// Scans for the lowest-ranked pair each round, keeping each pair's rank so only the two
// pairs around a merge are looked up again. O(n^2) compares, O(n) hash lookups.
void BpeModel::merge_small(int32_t* ids, size_t n, std::vector<int32_t>& out) const {
  if (n == 0) return;
  uint32_t ranks[128];
  int32_t merged[128];
  auto pair_rank = [&](size_t i) {
    const auto* v = merges_.find(FlatPairMap::key_of(ids[i], ids[i + 1]));
    if (v == nullptr) {
      ranks[i] = kNoMerge;
    } else {
      ranks[i] = v->rank;
      merged[i] = v->id;
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) pair_rank(i);
  while (n > 1) {
    size_t best = 0;
    uint32_t best_rank = kNoMerge;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNoMerge) break;
    ids[best] = merged[best];
    // Close the gap left by ids[best + 1].
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) pair_rank(best - 1);
    if (best + 1 < n) pair_rank(best);
  }
  out.insert(out.end(), ids, ids + n);
}

// Heap of (rank, position) with lazy invalidation, for long words.
void BpeModel::merge_large(int32_t* ids, size_t n, std::vector<int32_t>& out) const {
  struct Cand {
    uint32_t rank;
    uint32_t pos;
    int32_t merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  std::vector<bool> alive(n, true);
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[size_t(i)] < 0) return;
    const auto* v = merges_.find(FlatPairMap::key_of(ids[i], ids[next[size_t(i)]]));
    if (v != nullptr) heap.push({v->rank, static_cast<uint32_t>(i), v->id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    size_t i = c.pos;
    if (!alive[i] || next[i] < 0) continue;
    const auto* v = merges_.find(FlatPairMap::key_of(ids[i], ids[next[i]]));
    if (v == nullptr || v->rank != c.rank || v->id != c.merged) continue;  // stale
    size_t j = size_t(next[i]);
    ids[i] = c.merged;
    alive[j] = false;
    next[i] = next[j];
    if (next[j] >= 0) prev[size_t(next[j])] = static_cast<int32_t>(i);
    push(prev[i]);
    push(static_cast<int32_t>(i));
  }
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(ids[i]);
}

void BpeModel::encode_word_reference(std::string_view word, std::vector<int32_t>& out) const {
  if (options_.ignore_merges) {
    int32_t id = id_of_bytes(word);
    if (id >= 0 && !word.empty()) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> ids;
  for (unsigned char c : word)
    if (byte_id_[c] >= 0) ids.push_back(byte_id_[c]);
  for (;;) {
    size_t best = 0;
    uint32_t best_rank = kNoMerge;
    int32_t best_id = -1;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto* v = merges_.find(FlatPairMap::key_of(ids[i], ids[i + 1]));
      if (v != nullptr && v->rank < best_rank) {
        best_rank = v->rank;
        best = i;
        best_id = v->id;
      }
    }
    if (best_rank == kNoMerge) break;
    ids[best] = best_id;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace fathom::tok
