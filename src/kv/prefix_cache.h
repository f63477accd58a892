// The prefix cache: prompt blocks of a fixed number of tokens keyed by a chained XXH3 hash
// (the previous block's hash, the block's ids, a tenant salt), each holding what its tokens
// added to a sequence's KV as a CachedBlock (shared pages and an optional side object, whose
// contents only the model knows). Blocks form chains: a block is cached only under a cached
// parent, and only leaves (blocks with no cached child) are evicted, least recently used
// first — so every cached block is reachable from block 1. The tiered store (kv/store.h:
// disk, distributed) plugs in below this class: the engine fills it from there on a miss.
//
// Not thread-safe: one owner (the engine's executor thread) calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fathom::kv {

// What one prefix block added to a sequence's KV: pages shared with every sequence resumed
// from it (never rewritten) and optionally the window state at its end (a side object that
// makes a resume exact). Implemented by the model runner.
class CachedBlock {
 public:
  virtual ~CachedBlock() = default;
  // Bytes held: pages and the side object.
  virtual int64_t bytes() const = 0;
  virtual bool has_side_object() const = 0;
  // Frees the side object (the block stays a valid chain link).
  virtual void drop_side_object() = 0;
  // True when freeing the block would return pages to the pool (some page is held by this
  // block alone, or it has a side object).
  virtual bool frees_pages() const = 0;
};

// The chained hash after each full block of `tokens` (block_tokens > 0), seeded with `salt`.
// The one definition of a block's key: the prefix cache, the KV store, the KV event feed
// (kv_event_log.h) and the router's index all use it.
std::vector<uint64_t> prefix_block_hashes(std::span<const int32_t> tokens, int64_t block_tokens,
                                          uint64_t salt);
// The salt of a request's block hashes from its tenant string (a request's cache_salt): a stable
// hash (keys are shared between processes and machines), never 0; "" (no tenant) gives 0.
uint64_t tenant_salt(std::string_view cache_salt);

class PrefixCache {
 public:
  PrefixCache() = default;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest chain of cached blocks matching hashes[0, max_blocks), block 1 first; with
  // `need_side_object`, cut back to its last block that has a side object. The chain's blocks
  // become the most recently used (its tail newest). Pointers stay valid until the next
  // insert or eviction.
  std::vector<const CachedBlock*> match(std::span<const uint64_t> hashes, int64_t max_blocks,
                                        bool need_side_object);
  // How many of hashes[0, max_blocks) form a chain of cached blocks from block 1, with or
  // without side objects (nothing is marked used).
  int64_t chain_length(std::span<const uint64_t> hashes, int64_t max_blocks) const;
  // True when `hash` is cached (and marks it used).
  bool touch(uint64_t hash);
  bool contains(uint64_t hash) const { return entries_.count(hash) != 0; }
  // The block cached under `hash`, or null.
  const CachedBlock* find(uint64_t hash) const;
  // Replaces the block cached under `hash` by another of the same tokens (e.g. one that also
  // has its side object); its place in the chain stays. REQUIRES: hash cached.
  void replace(uint64_t hash, std::unique_ptr<CachedBlock> block);
  // Caches block number `index` (1-based) of a chain under `parent` (the previous block's
  // hash; ignored for block 1). REQUIRES: hash not cached; for index > 1, parent cached.
  void insert(uint64_t hash, uint64_t parent, int64_t index, std::unique_ptr<CachedBlock> block);
  // Drops the least recently used leaf (with `must_free`, only one whose removal returns
  // pages to the pool); false when there is none.
  bool evict_one(bool must_free);

  int64_t bytes() const { return bytes_; }
  int64_t blocks() const { return int64_t(entries_.size()); }
  // Called with (hash, parent, true) after every insert and (hash, parent, false) after every
  // eviction (parent: the previous block of its chain, 0 for a chain's first block), on the
  // owner's thread (e.g. to keep a view other threads can read, or to publish KV events).
  void set_observer(std::function<void(uint64_t hash, uint64_t parent, bool cached)> observer) {
    observer_ = std::move(observer);
  }

 private:
  struct Entry {
    uint64_t hash = 0, parent = 0;
    int64_t index = 0;  // 1-based position in its chain
    int64_t last_used = 0, children = 0;
    std::unique_ptr<CachedBlock> block;
  };
  std::unordered_map<uint64_t, Entry> entries_;
  int64_t bytes_ = 0, clock_ = 0;
  std::function<void(uint64_t, uint64_t, bool)> observer_;
};

}  // namespace fathom::kv
