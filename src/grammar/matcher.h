// GrammarMatcher: the state of one constrained generation. It computes the mask of tokens the
// grammar allows next, advances by the sampled token, rolls back rejected speculative tokens,
// and reports forced continuations (jump-forward).
//
// A matcher belongs to one request and is used by one thread at a time; many matchers may
// share one CompiledGrammar. Stop tokens (the table's stop ids) are allowed exactly when the
// grammar can end; accepting one terminates the matcher.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/stack.h"

namespace fathom::grammar {

class GrammarMatcher {
 public:
  // max_rollback: how many accepted tokens rollback() can undo (older history is dropped).
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                          size_t max_rollback = 256);

  // uint32 words a mask needs (ceil(vocab_size / 32)).
  size_t mask_words() const { return grammar_->tokens().mask_words(); }
  // Writes the allowed-token bitmask for the next token into words[0, mask_words()): bit
  // (id % 32) of words[id / 32] is set iff id is allowed. After termination nothing is.
  void fill_next_token_bitmask(uint32_t* words);
  // Advances by one token. False (and no change) if the grammar does not allow it.
  bool accept_token(int32_t id);
  // Advances by raw bytes as one step (for tests and forced text). False: no change.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted steps. False (and no change) if fewer are remembered.
  bool rollback(size_t n);
  // A stop token has been accepted.
  bool is_terminated() const { return terminated_; }
  // The grammar can end here (a stop token would be accepted).
  bool can_terminate();
  // The bytes that must come next, as long as exactly one byte is possible at each step (and
  // the grammar cannot end). Does not change the state.
  std::string find_jump_forward_string(size_t max_bytes = 1024);
  // The jump-forward string as at most `max_tokens` tokens, each the longest usable token its
  // rest starts with (a tail no token covers whole, or a stop token, ends it). Does not change
  // the state.
  std::vector<int32_t> jump_forward_tokens(size_t max_tokens);
  // Back to the start.
  void reset();
  // Steps that rollback() can still undo.
  size_t history_size() const { return history_.size(); }

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct Snapshot {
    std::vector<Top> config;
    bool terminated;
  };
  // Computes tops_/can_end_ for config_ if stale.
  void expand();
  // Runs bytes from the configuration; false if some byte is not allowed.
  bool run_bytes(std::vector<Top>& config, std::string_view bytes);
  // Checks the uncertain tokens of one top against its real stack, setting allowed bits.
  void check_uncertain(const Top& top, const PositionMask& pm, uint32_t* words);
  void push_history();

  std::shared_ptr<const CompiledGrammar> grammar_;
  const Pda* pda_;
  size_t max_rollback_;
  FrameArena arena_;
  ClosureScratch scratch_;
  std::vector<Top> config_;
  std::vector<Top> tops_;
  bool expanded_ = false;
  bool can_end_ = false;
  bool terminated_ = false;
  std::deque<Snapshot> history_;
  std::vector<uint32_t> tmp_words_;
  // Per-depth scratch for check_uncertain.
  std::vector<std::vector<Top>> cfg_d_, tops_d_;
  std::vector<Top> run_a_, run_b_;
};

}  // namespace fathom::grammar
