#include "grammar/automaton.h"

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>
#include <unordered_map>

namespace fathom::grammar {
namespace {

struct Nfa {
  struct State {
    std::vector<std::pair<ByteSet, int32_t>> bytes;
    std::vector<int32_t> eps;
    std::vector<std::pair<int32_t, int32_t>> calls;  // (grammar rule, target)
  };
  std::vector<State> states;
  int32_t add() {
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }
};

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, const std::vector<bool>& recursive, size_t limit)
      : g_(g), recursive_(recursive), limit_(limit) {}

  // Builds e so that it continues into `next`; returns its entry state, or -1 when over the
  // limits. Built backwards, a fragment depends only on (e, next), so equal pairs share one
  // fragment: an object's optional-member tails, which every "first member" alternative
  // repeats, are built once instead of once per alternative.
  int32_t build(ExprId e, int32_t next) {
    if (nfa.states.size() > limit_ || depth_ > kMaxDepth) return -1;
    const uint64_t key = (uint64_t(uint32_t(e)) << 32) | uint32_t(next);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    ++depth_;
    int32_t r = build_node(e, next);
    --depth_;
    if (r >= 0) memo_.emplace(key, r);
    return r;
  }

  Nfa nfa;

 private:
  // Expression nesting (including inlined rules) beyond this is "too large": the builder
  // recurses once per level.
  static constexpr int kMaxDepth = 2000;

  int32_t build_node(ExprId e, int32_t next) {
    const ExprNode& n = g_.node(e);
    switch (n.kind) {
      case ExprKind::kEmpty:
        return next;
      case ExprKind::kBytes: {
        int32_t s = nfa.add();
        nfa.states[s].bytes.push_back({n.bytes, next});
        return s;
      }
      case ExprKind::kSeq: {
        int32_t cur = next;
        for (size_t i = n.kids.size(); i-- > 0;) {
          cur = build(n.kids[i], cur);
          if (cur < 0) return -1;
        }
        return cur;
      }
      case ExprKind::kAlt: {
        int32_t s = nfa.add();
        for (ExprId k : n.kids) {
          int32_t x = build(k, next);
          if (x < 0) return -1;
          nfa.states[s].eps.push_back(x);
        }
        return s;
      }
      case ExprKind::kRepeat: {
        int32_t cur;
        if (n.max == kUnbounded) {
          int32_t loop = nfa.add();
          nfa.states[loop].eps.push_back(next);
          int32_t body = build(n.kids[0], loop);
          if (body < 0) return -1;
          nfa.states[loop].eps.push_back(body);
          cur = loop;
        } else {
          // X{0,k} = (X (X (...)?)?)? followed by next.
          cur = next;
          for (int32_t i = n.min; i < n.max; ++i) {
            int32_t s = nfa.add();
            nfa.states[s].eps.push_back(next);
            int32_t body = build(n.kids[0], cur);
            if (body < 0) return -1;
            nfa.states[s].eps.push_back(body);
            cur = s;
          }
        }
        for (int32_t i = 0; i < n.min; ++i) {
          cur = build(n.kids[0], cur);
          if (cur < 0) return -1;
        }
        return cur;
      }
      case ExprKind::kRef: {
        if (recursive_[n.rule]) {
          int32_t s = nfa.add();
          nfa.states[s].calls.push_back({n.rule, next});
          return s;
        }
        return build(g_.rule_body(n.rule), next);
      }
    }
    return -1;
  }

  std::unordered_map<uint64_t, int32_t> memo_;
  int depth_ = 0;
  const Grammar& g_;
  const std::vector<bool>& recursive_;
  size_t limit_;
};

// Iterative: expression trees from untrusted text can be deep.
// The rules the expression under `root` refers to. The expressions form a DAG (an object's
// optional-member tails are shared by every "first member" alternative): each node is
// visited once, marked in `visited` with `stamp` (a new stamp per call, so no clearing).
void collect_refs(const Grammar& g, ExprId root, std::vector<int32_t>& out,
                  std::vector<uint32_t>& visited, uint32_t stamp) {
  std::vector<ExprId> stack{root};
  while (!stack.empty()) {
    const ExprId e = stack.back();
    stack.pop_back();
    if (visited[size_t(e)] == stamp) continue;
    visited[size_t(e)] = stamp;
    const ExprNode& n = g.node(e);
    if (n.kind == ExprKind::kRef) out.push_back(n.rule);
    stack.insert(stack.end(), n.kids.begin(), n.kids.end());
  }
}

// Merges equivalent states (Moore's partition refinement): states of the same rule that
// accept alike, step to equivalent states on every byte and make equivalent calls. Subset
// construction leaves many such duplicates (one per branch a character class took).
void minimize(Pda& pda) {
  const size_t ns = pda.states.size();
  // Bytes b and b + 1 behave alike in every state: one representative per run.
  std::vector<int> reps{0};
  for (int b = 1; b < 256; ++b) {
    bool differs = false;
    for (size_t s = 0; s < ns && !differs; ++s) {
      differs = pda.next[s * 256 + b] != pda.next[s * 256 + b - 1];
    }
    if (differs) reps.push_back(b);
  }
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = 1469598103934665603ull;
      for (int32_t x : v) h = (h ^ uint32_t(x)) * 1099511628211ull;
      return size_t(h);
    }
  };
  std::vector<int32_t> cls(ns);
  size_t n_classes = 0;
  {
    std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
    for (size_t s = 0; s < ns; ++s) {
      const Pda::State& st = pda.states[s];
      std::vector<int32_t> key{st.rule, st.accepting, int32_t(st.calls_end - st.calls_begin)};
      cls[s] = ids.try_emplace(key, int32_t(ids.size())).first->second;
    }
    n_classes = ids.size();
  }
  std::vector<int32_t> sig, next_cls(ns);
  while (true) {
    std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
    ids.reserve(ns);
    for (size_t s = 0; s < ns; ++s) {
      sig.clear();
      sig.push_back(cls[s]);
      for (int b : reps) {
        int32_t t = pda.next[s * 256 + b];
        sig.push_back(t < 0 ? -1 : cls[t]);
      }
      const Pda::State& st = pda.states[s];
      for (uint32_t ci = st.calls_begin; ci < st.calls_end; ++ci) {
        sig.push_back(cls[pda.calls[ci].callee_start]);
        sig.push_back(cls[pda.calls[ci].ret]);
      }
      next_cls[s] = ids.try_emplace(sig, int32_t(ids.size())).first->second;
    }
    cls.swap(next_cls);
    if (ids.size() == n_classes) break;
    n_classes = ids.size();
  }
  if (n_classes == ns) return;
  // Rebuild with one representative per class.
  std::vector<int32_t> rep(n_classes, -1);
  for (size_t s = 0; s < ns; ++s) {
    if (rep[cls[s]] < 0) rep[cls[s]] = int32_t(s);
  }
  Pda out;
  out.states.resize(n_classes);
  out.next.assign(n_classes * 256, -1);
  for (size_t c = 0; c < n_classes; ++c) {
    const size_t s = size_t(rep[c]);
    Pda::State st = pda.states[s];
    st.calls_begin = uint32_t(out.calls.size());
    for (uint32_t ci = pda.states[s].calls_begin; ci < pda.states[s].calls_end; ++ci) {
      out.calls.push_back({cls[pda.calls[ci].callee_start], cls[pda.calls[ci].ret]});
    }
    st.calls_end = uint32_t(out.calls.size());
    out.states[c] = st;
    for (int b = 0; b < 256; ++b) {
      int32_t t = pda.next[s * 256 + b];
      out.next[c * 256 + b] = t < 0 ? -1 : cls[t];
    }
  }
  for (int32_t& r : pda.rule_start) r = cls[r];
  pda.states = std::move(out.states);
  pda.next = std::move(out.next);
  pda.calls = std::move(out.calls);
}

}  // namespace

Result<Pda> build_pda(const Grammar& g, const PdaLimits& limits, const CancelToken* cancel) {
  FATHOM_RETURN_IF_ERROR(g.validate());
  const size_t nr = g.rule_count();
  std::vector<std::vector<int32_t>> refs(nr);
  std::vector<uint32_t> visited(g.node_count(), 0);
  for (size_t r = 0; r < nr; ++r) {
    collect_refs(g, g.rule_body(int32_t(r)), refs[r], visited, uint32_t(r + 1));
    std::sort(refs[r].begin(), refs[r].end());
    refs[r].erase(std::unique(refs[r].begin(), refs[r].end()), refs[r].end());
  }
  // A rule is recursive when it can reach itself through references.
  std::vector<bool> recursive(nr, false);
  for (size_t r = 0; r < nr; ++r) {
    std::vector<bool> seen(nr, false);
    std::vector<int32_t> stack(refs[r].begin(), refs[r].end());
    while (!stack.empty() && !recursive[r]) {
      int32_t x = stack.back();
      stack.pop_back();
      if (x == int32_t(r)) recursive[r] = true;
      if (seen[x]) continue;
      seen[x] = true;
      for (int32_t y : refs[x]) stack.push_back(y);
    }
  }

  // Rules that get an automaton of their own: the root and every recursive rule reachable
  // from it through calls. Discovered while building.
  std::vector<int32_t> dfa_index(nr, -1);
  std::vector<int32_t> order;
  auto want = [&](int32_t r) {
    if (dfa_index[r] < 0) {
      dfa_index[r] = int32_t(order.size());
      order.push_back(r);
    }
    return dfa_index[r];
  };
  want(g.root());

  Pda pda;
  struct PendingCall {
    int32_t state;
    int32_t grammar_rule;
    int32_t ret;
  };
  std::vector<PendingCall> pending;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> state_calls;  // (grammar rule, ret)

  size_t subset_states = 0;
  for (size_t oi = 0; oi < order.size(); ++oi) {
    const int32_t rule = order[oi];
    if (is_cancelled(cancel)) return cancelled("grammar compilation cancelled");
    NfaBuilder nb(g, recursive, limits.max_nfa_states);
    const int32_t nfinal = nb.nfa.add();
    const int32_t nstart = nb.build(g.rule_body(rule), nfinal);
    if (nstart < 0) {
      return unsupported("grammar too large: rule '" + g.rule_name(rule) + "' expands past " +
                         std::to_string(limits.max_nfa_states) +
                         " automaton states or 2000 levels of nesting");
    }
    Nfa& nfa = nb.nfa;
    // Byte edges as maximal ranges (lo, hi, target).
    std::vector<std::vector<std::tuple<int, int, int32_t>>> ranges(nfa.states.size());
    for (size_t s = 0; s < nfa.states.size(); ++s) {
      for (const auto& [bs, t] : nfa.states[s].bytes) {
        // Maximal runs of set bits, found a word at a time.
        int b = 0;
        while (b < 256) {
          uint64_t w = bs.w[b >> 6] >> (b & 63);
          if (w == 0) {
            b = (b | 63) + 1;
            continue;
          }
          b += std::countr_zero(w);
          int hi = b;
          while (hi + 1 < 256 && bs.has(hi + 1)) ++hi;
          ranges[s].push_back({b, hi, t});
          b = hi + 1;
        }
      }
    }
    std::vector<int> bounds;
    std::vector<uint32_t> mark(nfa.states.size(), 0);
    uint32_t gen = 0;
    std::vector<int32_t> stack;
    auto closure = [&](std::vector<int32_t>& set) {
      ++gen;
      stack.clear();
      for (int32_t s : set) {
        if (mark[s] != gen) {
          mark[s] = gen;
          stack.push_back(s);
        }
      }
      set.clear();
      while (!stack.empty()) {
        int32_t s = stack.back();
        stack.pop_back();
        // Keep only states that matter for the future (byte edges, calls, the end): sets
        // that differ in pass-through states alone are the same DFA state.
        const Nfa::State& ns_ = nfa.states[s];
        if (!ns_.bytes.empty() || !ns_.calls.empty() || s == nfinal) set.push_back(s);
        for (int32_t t : nfa.states[s].eps) {
          if (mark[t] != gen) {
            mark[t] = gen;
            stack.push_back(t);
          }
        }
      }
      std::sort(set.begin(), set.end());
    };
    struct SetHash {
      size_t operator()(const std::vector<int32_t>& v) const {
        uint64_t h = 1469598103934665603ull;
        for (int32_t x : v) h = (h ^ uint32_t(x)) * 1099511628211ull;
        return size_t(h);
      }
    };
    std::unordered_map<std::vector<int32_t>, int32_t, SetHash> ids;
    std::vector<std::vector<int32_t>> work;
    const int32_t base = int32_t(pda.states.size());
    auto intern = [&](std::vector<int32_t> set) -> int32_t {
      auto it = ids.find(set);
      if (it != ids.end()) return it->second;
      int32_t id = base + int32_t(work.size());
      ids.emplace(set, id);
      work.push_back(std::move(set));
      return id;
    };
    std::vector<int32_t> s0{nstart};
    closure(s0);
    intern(s0);
    pda.rule_start.push_back(base);
    pda.rule_names.push_back(g.rule_name(rule));
    for (size_t wi = 0; wi < work.size(); ++wi) {
      if (base + wi >= limits.max_dfa_states) {
        return unsupported("grammar too large: more than " + std::to_string(limits.max_dfa_states) +
                           " automaton states");
      }
      if (is_cancelled(cancel)) return cancelled("grammar compilation cancelled");
      const std::vector<int32_t> set = std::move(work[wi]);
      subset_states += set.size();
      if (subset_states > limits.max_subset_states) {
        return unsupported("grammar too large: its automaton's states hold more than " +
                           std::to_string(limits.max_subset_states) + " states of the NFA");
      }
      Pda::State st;
      st.rule = int32_t(oi);
      st.accepting = std::binary_search(set.begin(), set.end(), nfinal);
      pda.states.push_back(st);
      pda.next.resize(pda.states.size() * 256, -1);
      state_calls.emplace_back();
      const size_t row = (base + wi) * 256;
      // Split the byte space at every edge boundary; bytes inside one interval go to the
      // same set of NFA states.
      bounds.assign({0, 256});
      for (int32_t s : set) {
        for (const auto& [lo, hi, t] : ranges[s]) {
          bounds.push_back(lo);
          bounds.push_back(hi + 1);
        }
      }
      std::sort(bounds.begin(), bounds.end());
      bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
      std::vector<int32_t> raw, prev_raw;
      int32_t prev_target = -1;
      for (size_t k = 0; k + 1 < bounds.size(); ++k) {
        const int b = bounds[k];
        raw.clear();
        for (int32_t s : set) {
          for (const auto& [lo, hi, t] : ranges[s]) {
            if (lo <= b && b <= hi) raw.push_back(t);
          }
        }
        if (raw.empty()) continue;
        std::sort(raw.begin(), raw.end());
        raw.erase(std::unique(raw.begin(), raw.end()), raw.end());
        if (raw != prev_raw || prev_target < 0) {
          std::vector<int32_t> cl = raw;
          closure(cl);
          prev_target = intern(std::move(cl));
          prev_raw = raw;
        }
        for (int x = b; x < bounds[k + 1]; ++x) pda.next[row + x] = prev_target;
      }
      std::map<int32_t, std::vector<int32_t>> by_rule;
      for (int32_t s : set) {
        for (auto [r, t] : nfa.states[s].calls) by_rule[r].push_back(t);
      }
      for (auto& [r, targets] : by_rule) {
        closure(targets);
        int32_t ret = intern(std::move(targets));
        want(r);
        pending.push_back({base + int32_t(wi), r, ret});
      }
    }
  }
  // Resolve calls now that every rule has a start state.
  std::vector<std::vector<Pda::Call>> calls_of(pda.states.size());
  for (const PendingCall& pc : pending) {
    calls_of[pc.state].push_back({pda.rule_start[dfa_index[pc.grammar_rule]], pc.ret});
  }
  const size_t ns = pda.states.size();
  const size_t nrules = pda.rule_start.size();

  // Trim: live states can reach acceptance; productive rules have a live start.
  // Backward search over byte edges from accepting states; a call makes its state live
  // once both the callee's start and the return state are live.
  std::vector<bool> live(ns, false);
  {
    std::vector<std::vector<int32_t>> pred(ns);
    for (size_t s = 0; s < ns; ++s) {
      int32_t last = -1;
      for (int b = 0; b < 256; ++b) {
        int32_t t = pda.next[s * 256 + b];
        if (t >= 0 && t != last) {
          pred[t].push_back(int32_t(s));
          last = t;
        }
      }
    }
    std::vector<int32_t> stack;
    auto mark = [&](int32_t s) {
      if (live[s]) return;
      live[s] = true;
      stack.push_back(s);
      while (!stack.empty()) {
        int32_t x = stack.back();
        stack.pop_back();
        for (int32_t p : pred[x]) {
          if (!live[p]) {
            live[p] = true;
            stack.push_back(p);
          }
        }
      }
    };
    for (size_t s = 0; s < ns; ++s) {
      if (pda.states[s].accepting) mark(int32_t(s));
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t s = 0; s < ns; ++s) {
        if (live[s]) continue;
        for (const Pda::Call& c : calls_of[s]) {
          if (live[c.callee_start] && live[c.ret]) {
            mark(int32_t(s));
            changed = true;
            break;
          }
        }
      }
    }
  }
  if (!live[pda.rule_start[0]]) return invalid_argument("grammar accepts no string");
  for (size_t s = 0; s < ns; ++s) {
    Pda::State& st = pda.states[s];
    st.calls_begin = uint32_t(pda.calls.size());
    if (live[s]) {
      for (const Pda::Call& c : calls_of[s]) {
        if (live[c.callee_start] && live[c.ret]) pda.calls.push_back(c);
      }
    }
    st.calls_end = uint32_t(pda.calls.size());
    int nbytes = 0, last = -1;
    for (int b = 0; b < 256; ++b) {
      int32_t& t = pda.next[s * 256 + b];
      if (t >= 0 && (!live[s] || !live[t])) t = -1;
      if (t >= 0) {
        ++nbytes;
        last = b;
      }
    }
    st.has_bytes = nbytes > 0;
    st.single_byte = nbytes == 1 ? int16_t(last) : int16_t(-1);
    st.trivial = !st.accepting && st.calls_begin == st.calls_end;
  }

  if (limits.minimize) minimize(pda);
  const size_t n_states = pda.states.size();
  // Nullable states (can accept without reading a byte) and first bytes.
  std::vector<bool> nullable(n_states, false);
  std::vector<ByteSet> first(n_states);
  for (size_t s = 0; s < n_states; ++s) {
    nullable[s] = pda.states[s].accepting;
    for (int b = 0; b < 256; ++b) {
      if (pda.next[s * 256 + b] >= 0) first[s].set(b);
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t s = 0; s < n_states; ++s) {
      const Pda::State& st = pda.states[s];
      for (uint32_t ci = st.calls_begin; ci < st.calls_end; ++ci) {
        const Pda::Call& c = pda.calls[ci];
        ByteSet f = first[s];
        f |= first[c.callee_start];
        if (nullable[c.callee_start]) {
          f |= first[c.ret];
          if (nullable[c.ret] && !nullable[s]) {
            nullable[s] = true;
            changed = true;
          }
        }
        if (!(f == first[s])) {
          first[s] = f;
          changed = true;
        }
      }
    }
  }
  // Left recursion: a rule that calls, without reading a byte, a rule that calls it back.
  {
    std::vector<std::vector<int32_t>> left(nrules);
    for (size_t r = 0; r < nrules; ++r) {
      std::vector<int32_t> stack{pda.rule_start[r]};
      std::vector<bool> seen(n_states, false);
      while (!stack.empty()) {
        int32_t s = stack.back();
        stack.pop_back();
        if (seen[s]) continue;
        seen[s] = true;
        const Pda::State& st = pda.states[s];
        for (uint32_t ci = st.calls_begin; ci < st.calls_end; ++ci) {
          const Pda::Call& c = pda.calls[ci];
          left[r].push_back(pda.states[c.callee_start].rule);
          if (nullable[c.callee_start]) stack.push_back(c.ret);
        }
      }
    }
    // Cycle detection by DFS colors.
    std::vector<int> color(nrules, 0);
    std::string cyclic;
    auto dfs = [&](auto&& self, int32_t r) -> bool {
      color[r] = 1;
      for (int32_t x : left[r]) {
        if (color[x] == 1 || (color[x] == 0 && self(self, x))) {
          if (cyclic.empty()) cyclic = pda.rule_names[x];
          return true;
        }
      }
      color[r] = 2;
      return false;
    };
    for (size_t r = 0; r < nrules; ++r) {
      if (color[r] == 0 && dfs(dfs, int32_t(r))) {
        return unsupported("left recursion through rule '" + cyclic + "'");
      }
    }
  }
  // Follow sets.
  pda.follow.assign(nrules, ByteSet{});
  pda.follow_end.assign(nrules, false);
  pda.follow_end[0] = true;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t s = 0; s < n_states; ++s) {
      const Pda::State& st = pda.states[s];
      for (uint32_t ci = st.calls_begin; ci < st.calls_end; ++ci) {
        const Pda::Call& c = pda.calls[ci];
        int32_t callee = pda.states[c.callee_start].rule;
        ByteSet f = pda.follow[callee];
        f |= first[c.ret];
        bool end = pda.follow_end[callee];
        if (nullable[c.ret]) {
          f |= pda.follow[st.rule];
          end = end || pda.follow_end[st.rule];
        }
        if (!(f == pda.follow[callee]) || end != pda.follow_end[callee]) {
          pda.follow[callee] = f;
          pda.follow_end[callee] = end;
          changed = true;
        }
      }
    }
  }
  pda.root_start = pda.rule_start[0];
  return pda;
}

}  // namespace fathom::grammar
