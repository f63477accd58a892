// Pda: the byte-level pushdown automaton a Grammar compiles to. Every rule that takes part in
// recursion (and the root) becomes a deterministic finite automaton over bytes whose states may
// also "call" another such rule (push a return state, jump to the callee's start). Rules that
// are not recursive are inlined into their callers, so a grammar without recursion (most JSON
// schemas, every regex) is a single DFA and never touches the stack.
//
// State ids are global across rules. A Pda is immutable after build_pda() and may be read from
// any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cancel.h"
#include "core/status.h"
#include "grammar/grammar.h"

namespace fathom::grammar {

struct PdaLimits {
  size_t max_nfa_states = 4'000'000;
  size_t max_dfa_states = 200'000;
  // The subset construction's work: the NFA states of all DFA states together. Bounds the
  // time a grammar can take to fail (an object with 1,000 optional members: about 23 million).
  size_t max_subset_states = 32'000'000;
  // Merge equivalent states (fewer states to precompute masks for, but Moore refinement costs
  // more than building: 3.6 -> 28 ms on a 1,775-state schema).
  bool minimize = false;
};

struct Pda {
  struct Call {
    int32_t callee_start;  // start state of the called rule
    int32_t ret;           // state to continue in once the callee accepts
  };
  struct State {
    int32_t rule = 0;  // index into rule_start / rule_names
    uint32_t calls_begin = 0, calls_end = 0;
    bool accepting = false;
    bool has_bytes = false;
    // Not accepting and no calls: the closure of this state is the state itself.
    bool trivial = false;
    int16_t single_byte = -1;  // the only byte with a transition, or -1
  };

  std::vector<State> states;
  std::vector<int32_t> next;  // states.size() * 256; -1 = no transition
  std::vector<Call> calls;
  std::vector<int32_t> rule_start;
  std::vector<std::string> rule_names;
  // Per rule: the bytes that can come right after the rule ends, in any context, and whether
  // the input may end there.
  std::vector<ByteSet> follow;
  std::vector<bool> follow_end;
  int32_t root_start = 0;

  int32_t step(int32_t s, uint8_t b) const { return next[size_t(s) * 256 + b]; }
};

// Builds the automaton. Errors: kUnsupported for left recursion or a grammar over the
// limits; kInvalidArgument for a grammar that accepts no string; kCancelled once `cancel`
// (polled at every automaton state) is raised.
Result<Pda> build_pda(const Grammar& g, const PdaLimits& limits = {},
                      const CancelToken* cancel = nullptr);

}  // namespace fathom::grammar
