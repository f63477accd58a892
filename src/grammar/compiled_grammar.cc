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
    const Grammar& g, std::shared_ptr<const TokenTable> tokens, const CompileOptions& options,
    const CancelToken* cancel) {
  if (!tokens) return invalid_argument("no token table");
  FATHOM_ASSIGN_OR_RETURN(Pda pda, build_pda(g, options.limits, cancel));
  std::shared_ptr<CompiledGrammar> cg(new CompiledGrammar());
  cg->pda_ = std::move(pda);
  cg->tokens_ = std::move(tokens);
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
  mask_bytes_.fetch_add(sizeof(PositionMask) + 4 * (made->ids.capacity() + made->bits.capacity() +
                                                    made->uncertain.capacity()),
                        std::memory_order_relaxed);
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

size_t CompiledGrammar::automaton_bytes() const {
  size_t n = sizeof(*this) + pda_.states.size() * (sizeof(Pda::State) + sizeof(void*)) +
             pda_.next.size() * sizeof(int32_t) + pda_.calls.size() * sizeof(Pda::Call) +
             pda_.rule_start.size() * sizeof(int32_t) + pda_.follow.size() * sizeof(ByteSet) +
             pda_.follow_end.size() / 8;
  for (const std::string& r : pda_.rule_names) n += sizeof(r) + r.size();
  return n;
}

size_t CompiledGrammar::cached_bytes() const { return mask_bytes_.load(std::memory_order_relaxed); }

// Walks the token trie from `state` with an unknown caller (kSentinel) below it.
std::unique_ptr<PositionMask> CompiledGrammar::compute_mask(int32_t state) const {
  const TokenTable& tt = *tokens_;
  const auto& trie = tt.trie();
  const size_t n_tokens = tt.sorted().size();
  const size_t max_depth = tt.max_token_len() + 1;
  // Per-thread working memory, reused across walks. Accepted and uncertain tokens are found
  // in trie order, which is rank order, so both lists come out sorted by rank.
  struct Scratch {
    std::vector<std::vector<Top>> cfg, tops;
    std::vector<uint8_t> flag, pop_ok, simple;
    std::vector<int32_t> s_state, s_frame, accepted;
    FrameArena arena;
    ClosureScratch closure;
  };
  thread_local Scratch w;
  w.cfg.resize(max_depth);
  w.tops.resize(max_depth);
  w.flag.assign(max_depth, 0);
  w.pop_ok.assign(max_depth, 0);
  w.simple.assign(max_depth, 0);
  w.s_state.assign(max_depth, 0);
  w.s_frame.assign(max_depth, 0);
  w.accepted.clear();
  w.arena.clear();
  auto& cfg = w.cfg;
  auto& tops = w.tops;
  auto& flag = w.flag;
  auto& pop_ok = w.pop_ok;
  auto& simple = w.simple;
  auto& s_state = w.s_state;
  auto& s_frame = w.s_frame;
  auto& accepted = w.accepted;
  FrameArena& arena = w.arena;
  ClosureScratch& scratch = w.closure;
  auto m = std::make_unique<PositionMask>();
  const ByteSet& follow = pda_.follow[pda_.states[state].rule];
  tops[0] = {Top{state, kSentinel}};
  simple[0] = 1;
  s_state[0] = state;
  s_frame[0] = kSentinel;
  const auto& states = pda_.states;
  size_t i = 0;
  while (i < trie.size()) {
    const TokenTable::TrieNode& node = trie[i];
    const size_t d = node.depth;
    flag[d] = flag[d - 1] || (pop_ok[d - 1] && follow.has(node.byte));
    bool alive;
    bool done = false;  // tops[d] / simple[d] already set
    if (simple[d - 1]) {
      const int32_t t = pda_.step(s_state[d - 1], node.byte);
      alive = t >= 0;
      if (alive && states[t].trivial) {
        simple[d] = 1;
        s_state[d] = t;
        s_frame[d] = s_frame[d - 1];
        pop_ok[d] = 0;
        done = true;
      } else if (alive) {
        cfg[d].assign(1, Top{t, s_frame[d - 1]});
      }
    } else {
      advance(pda_, tops[d - 1], node.byte, cfg[d]);
      alive = !cfg[d].empty();
    }
    if (!alive) {
      if (flag[d]) {
        const int32_t sub_end = tt.sub_end(i);
        for (int32_t r = node.sub_begin; r < sub_end; ++r) m->uncertain.push_back(r);
      }
      i = size_t(node.end);
      continue;
    }
    for (int32_t r = node.sub_begin; r < node.sub_begin + node.tok_count; ++r) {
      accepted.push_back(r);
    }
    if (!done && size_t(node.end) > i + 1) {
      ClosureInfo info = closure(pda_, arena, cfg[d], tops[d], scratch);
      pop_ok[d] = info.hit_sentinel;
      simple[d] = tops[d].size() == 1 && states[tops[d][0].state].trivial;
      if (simple[d]) {
        s_state[d] = tops[d][0].state;
        s_frame[d] = tops[d][0].frame;
      }
    }
    ++i;
  }

  const auto& sorted = tt.sorted();
  const size_t n_acc = accepted.size();
  m->accepted = n_acc;
  const size_t words = tt.mask_words();
  const size_t n_rej = n_tokens - n_acc;
  if (n_acc <= words) {
    m->kind = PositionMask::Kind::kAcceptList;
    for (int32_t r : accepted) m->ids.push_back(sorted[r]);
  } else if (n_rej <= words) {
    m->kind = PositionMask::Kind::kRejectList;
    size_t k = 0;
    for (size_t r = 0; r < n_tokens; ++r) {
      if (k < n_acc && accepted[k] == int32_t(r)) {
        ++k;
      } else {
        m->ids.push_back(sorted[r]);
      }
    }
  } else {
    m->kind = PositionMask::Kind::kBitset;
    m->bits.assign(words, 0);
    for (int32_t r : accepted) m->bits[sorted[r] >> 5] |= 1u << (sorted[r] & 31);
  }
  std::sort(m->ids.begin(), m->ids.end());
  return m;
}

}  // namespace fathom::grammar
