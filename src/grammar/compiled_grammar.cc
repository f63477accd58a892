#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "grammar/stack.h"

namespace fathom::grammar {

void PositionMask::apply(uint32_t* words, size_t n_words, const std::vector<uint32_t>& usable,
                         bool overwrite) const {
  switch (kind) {
    case Kind::kAcceptList:
      if (overwrite) std::memset(words, 0, n_words * sizeof(uint32_t));
      for (int32_t id : ids) words[id >> 5] |= 1u << (id & 31);
      return;
    case Kind::kBitset:
      if (overwrite) {
        std::memcpy(words, bits.data(), n_words * sizeof(uint32_t));
      } else {
        for (size_t i = 0; i < n_words; ++i) words[i] |= bits[i];
      }
      return;
    case Kind::kRejectList:
      if (overwrite) {
        std::memcpy(words, usable.data(), n_words * sizeof(uint32_t));
        for (int32_t id : ids) words[id >> 5] &= ~(1u << (id & 31));
      } else {
        // OR in (usable minus ids) word by word: ids are sorted by id.
        size_t k = 0;
        for (size_t w = 0; w < n_words; ++w) {
          uint32_t m = usable[w];
          while (k < ids.size() && size_t(ids[k] >> 5) == w) {
            m &= ~(1u << (ids[k] & 31));
            ++k;
          }
          words[w] |= m;
        }
      }
      return;
  }
}

CompiledGrammar::~CompiledGrammar() = default;

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(
    const Grammar& g, std::shared_ptr<const TokenTable> tokens, const CompileOptions& options) {
  if (!tokens) return invalid_argument("no token table");
  FATHOM_ASSIGN_OR_RETURN(Pda pda, build_pda(g, options.limits));
  std::shared_ptr<CompiledGrammar> cg(new CompiledGrammar());
  cg->pda_ = std::move(pda);
  cg->tokens_ = std::move(tokens);
  cg->text_ = g.to_string();
  cg->cache_ = std::make_unique<std::atomic<const PositionMask*>[]>(cg->pda_.states.size());
  for (size_t i = 0; i < cg->pda_.states.size(); ++i) cg->cache_[i].store(nullptr);
  if (options.precompute) cg->precompute();
  return std::shared_ptr<const CompiledGrammar>(std::move(cg));
}

const PositionMask& CompiledGrammar::mask_at(int32_t state) const {
  const PositionMask* m = cache_[state].load(std::memory_order_acquire);
  if (m) return *m;
  std::unique_ptr<PositionMask> made = compute_mask(state);
  std::lock_guard<std::mutex> lock(mu_);
  m = cache_[state].load(std::memory_order_acquire);
  if (m) return *m;
  m = made.get();
  owned_.push_back(std::move(made));
  cache_[state].store(m, std::memory_order_release);
  return *m;
}

void CompiledGrammar::precompute(ThreadPool* pool) const {
  std::vector<int32_t> todo;
  for (size_t s = 0; s < pda_.states.size(); ++s) {
    if (pda_.states[s].has_bytes) todo.push_back(int32_t(s));
  }
  if (pool) {
    pool->parallel_for(todo.size(), [&](size_t i) { (void)mask_at(todo[i]); });
  } else {
    for (int32_t s : todo) (void)mask_at(s);
  }
}

size_t CompiledGrammar::cached_states() const {
  std::lock_guard<std::mutex> lock(mu_);
  return owned_.size();
}

// Walks the token trie from `state` with an unknown caller (kSentinel) below it.
std::unique_ptr<PositionMask> CompiledGrammar::compute_mask(int32_t state) const {
  const TokenTable& tt = *tokens_;
  const auto& trie = tt.trie();
  const size_t n_tokens = tt.sorted().size();
  std::vector<uint8_t> cls(n_tokens, 0);  // 0 rejected, 1 accepted, 2 uncertain
  const size_t max_depth = tt.max_token_len() + 1;
  std::vector<std::vector<Top>> cfg(max_depth), tops(max_depth);
  std::vector<uint8_t> flag(max_depth, 0), pop_ok(max_depth, 0);
  FrameArena arena;
  ClosureScratch scratch;
  const ByteSet& follow = pda_.follow[pda_.states[state].rule];
  tops[0] = {Top{state, kSentinel}};
  size_t i = 0;
  while (i < trie.size()) {
    const TokenTable::TrieNode& node = trie[i];
    const size_t d = node.depth;
    advance(pda_, tops[d - 1], node.byte, cfg[d]);
    flag[d] = flag[d - 1] || (pop_ok[d - 1] && follow.has(node.byte));
    if (cfg[d].empty()) {
      if (flag[d]) {
        for (int32_t r = node.sub_begin; r < node.sub_end; ++r) cls[r] = 2;
      }
      i = size_t(node.end);
      continue;
    }
    for (int32_t r = node.tok_begin; r < node.tok_end; ++r) cls[r] = 1;
    if (size_t(node.end) > i + 1) {
      ClosureInfo info = closure(pda_, arena, cfg[d], tops[d], scratch);
      pop_ok[d] = info.hit_sentinel;
    }
    ++i;
  }

  auto m = std::make_unique<PositionMask>();
  const auto& sorted = tt.sorted();
  size_t n_acc = 0;
  for (size_t r = 0; r < n_tokens; ++r) {
    if (cls[r] == 1) ++n_acc;
    if (cls[r] == 2) m->uncertain.push_back(int32_t(r));
  }
  m->accepted = n_acc;
  const size_t words = tt.mask_words();
  const size_t n_rej = n_tokens - n_acc;
  if (n_acc <= words) {
    m->kind = PositionMask::Kind::kAcceptList;
    for (size_t r = 0; r < n_tokens; ++r) {
      if (cls[r] == 1) m->ids.push_back(sorted[r]);
    }
  } else if (n_rej <= words) {
    m->kind = PositionMask::Kind::kRejectList;
    for (size_t r = 0; r < n_tokens; ++r) {
      if (cls[r] != 1) m->ids.push_back(sorted[r]);
    }
  } else {
    m->kind = PositionMask::Kind::kBitset;
    m->bits.assign(words, 0);
    for (size_t r = 0; r < n_tokens; ++r) {
      if (cls[r] == 1) m->bits[sorted[r] >> 5] |= 1u << (sorted[r] & 31);
    }
  }
  std::sort(m->ids.begin(), m->ids.end());
  return m;
}

}  // namespace fathom::grammar
