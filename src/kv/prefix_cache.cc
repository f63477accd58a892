#include "kv/prefix_cache.h"

#include <xxhash.h>

#include "kv/block_format.h"

namespace fathom::kv {

namespace {

// A chain's first block has no parent (insert() ignores the one it is given).
uint64_t parent_of_first(int64_t index, uint64_t parent) { return index > 1 ? parent : 0; }

}  // namespace

uint64_t tenant_salt(std::string_view cache_salt) {
  if (cache_salt.empty()) return 0;
  FingerprintBuilder fb;
  fb.add("fathom-tenant");
  fb.add(cache_salt);
  return fb.finish().lo | 1;
}

std::vector<uint64_t> prefix_block_hashes(std::span<const int32_t> tokens, int64_t block_tokens,
                                          uint64_t salt) {
  std::vector<uint64_t> out;
  uint64_t h = salt;
  for (int64_t b = 0; (b + 1) * block_tokens <= int64_t(tokens.size()); ++b) {
    h = XXH3_64bits_withSeed(&tokens[size_t(b * block_tokens)],
                             size_t(block_tokens) * sizeof(int32_t), h);
    out.push_back(h);
  }
  return out;
}

std::vector<const CachedBlock*> PrefixCache::match(std::span<const uint64_t> hashes,
                                                   int64_t max_blocks, bool need_side_object) {
  std::vector<Entry*> chain;
  for (size_t b = 0; b < hashes.size() && int64_t(b) < max_blocks; ++b) {
    auto it = entries_.find(hashes[b]);
    if (it == entries_.end() || it->second.index != int64_t(b + 1)) break;
    chain.push_back(&it->second);
  }
  while (need_side_object && !chain.empty() && !chain.back()->block->has_side_object())
    chain.pop_back();
  // Newest last: a chain's ancestors are never older than its tail.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) (*it)->last_used = ++clock_;
  std::vector<const CachedBlock*> out;
  out.reserve(chain.size());
  for (Entry* e : chain) out.push_back(e->block.get());
  return out;
}

int64_t PrefixCache::chain_length(std::span<const uint64_t> hashes, int64_t max_blocks) const {
  int64_t n = 0;
  while (n < max_blocks && size_t(n) < hashes.size()) {
    auto it = entries_.find(hashes[size_t(n)]);
    if (it == entries_.end() || it->second.index != n + 1) break;
    ++n;
  }
  return n;
}

const CachedBlock* PrefixCache::find(uint64_t hash) const {
  auto it = entries_.find(hash);
  return it == entries_.end() ? nullptr : it->second.block.get();
}

void PrefixCache::replace(uint64_t hash, std::unique_ptr<CachedBlock> block) {
  Entry& e = entries_.at(hash);
  bytes_ += block->bytes() - e.block->bytes();
  e.block = std::move(block);
  e.last_used = ++clock_;
}

bool PrefixCache::touch(uint64_t hash) {
  auto it = entries_.find(hash);
  if (it == entries_.end()) return false;
  it->second.last_used = ++clock_;
  return true;
}

void PrefixCache::insert(uint64_t hash, uint64_t parent, int64_t index,
                         std::unique_ptr<CachedBlock> block) {
  if (index > 1) {
    auto p = entries_.find(parent);
    if (p != entries_.end()) {
      ++p->second.children;
      p->second.last_used = ++clock_;
    }
  }
  Entry e;
  e.hash = hash;
  e.parent = parent;
  e.index = index;
  e.block = std::move(block);
  e.last_used = ++clock_;
  bytes_ += e.block->bytes();
  entries_.emplace(hash, std::move(e));
  if (observer_) observer_(hash, parent_of_first(index, parent), true);
}

bool PrefixCache::evict_one(bool must_free) {
  Entry* victim = nullptr;
  for (auto& [h, e] : entries_) {
    if (e.children > 0) continue;
    if (must_free && !e.block->frees_pages()) continue;
    if (!victim || e.last_used < victim->last_used) victim = &e;
  }
  if (!victim) return false;
  if (victim->index > 1) {
    auto p = entries_.find(victim->parent);
    if (p != entries_.end()) --p->second.children;
  }
  bytes_ -= victim->block->bytes();
  const uint64_t hash = victim->hash;
  const uint64_t parent = parent_of_first(victim->index, victim->parent);
  entries_.erase(hash);
  if (observer_) observer_(hash, parent, false);
  return true;
}

}  // namespace fathom::kv
