// Stacks of the pushdown automaton, shared by the mask precomputation and the matcher.
//
// A configuration is a set of Tops: an automaton state plus the frame to return to when the
// state's rule accepts. Frames are hash-consed in a FrameArena (a persistent stack: frames
// are never changed once made, so configurations of earlier steps stay valid for rollback,
// and equal stacks have equal ids). kNoFrame is the bottom of the real stack; kSentinel
// stands for "an unknown caller" during precomputation. Not thread-safe: one arena per user.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"

namespace fathom::grammar {

inline constexpr int32_t kNoFrame = -1;
inline constexpr int32_t kSentinel = -2;

struct Top {
  int32_t state;
  int32_t frame;
  bool operator==(const Top& o) const { return state == o.state && frame == o.frame; }
  bool operator<(const Top& o) const {
    return state != o.state ? state < o.state : frame < o.frame;
  }
};

class FrameArena {
 public:
  struct Frame {
    int32_t ret;
    int32_t parent;
  };
  int32_t intern(int32_t ret, int32_t parent) {
    uint64_t key = (uint64_t(uint32_t(ret)) << 32) | uint32_t(parent);
    auto [it, inserted] = index_.try_emplace(key, int32_t(frames_.size()));
    if (inserted) frames_.push_back({ret, parent});
    return it->second;
  }
  const Frame& at(int32_t f) const { return frames_[f]; }
  size_t size() const { return frames_.size(); }
  void clear() {
    frames_.clear();
    index_.clear();
  }

 private:
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> index_;
};

struct ClosureInfo {
  bool can_end = false;       // the root rule can accept here (the input may end)
  bool hit_sentinel = false;  // a rule returned into the unknown caller
};

// Scratch vectors for closure(), reused across calls to avoid allocation.
struct ClosureScratch {
  std::vector<Top> work, visited;
};

// Expands a configuration into its tops: every state with byte transitions reachable by
// calls and returns without reading a byte. `tops` is cleared first.
inline ClosureInfo closure(const Pda& pda, FrameArena& arena, const std::vector<Top>& config,
                           std::vector<Top>& tops, ClosureScratch& scratch) {
  ClosureInfo info;
  tops.clear();
  if (config.size() == 1 && pda.states[config[0].state].trivial) {
    tops.push_back(config[0]);
    return info;
  }
  std::vector<Top>& work = scratch.work;
  std::vector<Top>& visited = scratch.visited;
  work.assign(config.begin(), config.end());
  visited.clear();
  while (!work.empty()) {
    Top t = work.back();
    work.pop_back();
    bool dup = false;
    for (const Top& v : visited) {
      if (v == t) {
        dup = true;
        break;
      }
    }
    if (dup) continue;
    visited.push_back(t);
    const Pda::State& st = pda.states[t.state];
    if (st.has_bytes) tops.push_back(t);
    for (uint32_t ci = st.calls_begin; ci < st.calls_end; ++ci) {
      const Pda::Call& c = pda.calls[ci];
      work.push_back({c.callee_start, arena.intern(c.ret, t.frame)});
    }
    if (st.accepting) {
      if (t.frame == kNoFrame) {
        info.can_end = true;
      } else if (t.frame == kSentinel) {
        info.hit_sentinel = true;
      } else {
        const FrameArena::Frame& f = arena.at(t.frame);
        work.push_back({f.ret, f.parent});
      }
    }
  }
  return info;
}

// The configuration after reading byte b from the tops (deduplicated).
inline void advance(const Pda& pda, const std::vector<Top>& tops, uint8_t b,
                    std::vector<Top>& out) {
  out.clear();
  for (const Top& t : tops) {
    int32_t n = pda.step(t.state, b);
    if (n < 0) continue;
    Top x{n, t.frame};
    bool dup = false;
    for (const Top& o : out) {
      if (o == x) {
        dup = true;
        break;
      }
    }
    if (!dup) out.push_back(x);
  }
}

}  // namespace fathom::grammar
