// CompiledGrammar: a grammar's pushdown automaton bound to a vocabulary, plus the adaptive
// token-mask cache (XGrammar's design): for every automaton state with byte transitions, the
// tokens are split once into those accepted whatever the stack holds (the token's bytes are
// consumed inside the state's rule), those rejected whatever the stack holds, and the few
// "uncertain" ones whose bytes run past the end of the rule into an unknown caller; only the
// last are checked against the real stack at run time. For a grammar without recursion there
// are none, and a mask is a copy of a precomputed set.
//
// The per-state masks are computed when a state is first reached (or all at once with
// precompute()). A CompiledGrammar is logically immutable and may be shared by any number of
// matchers on any threads; the lazy cache is internally synchronized.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/token_table.h"

namespace fathom {
class ThreadPool;
}

namespace fathom::grammar {

// The tokens of one automaton state, split as described above.
struct PositionMask {
  enum class Kind : uint8_t {
    kAcceptList,  // ids: the accepted tokens
    kRejectList,  // ids: the usable tokens not accepted
    kBitset,      // bits: the accepted tokens
  };
  Kind kind = Kind::kAcceptList;
  std::vector<int32_t> ids;
  std::vector<uint32_t> bits;
  // Trie-order ranks (TokenTable::sorted indices) of the uncertain tokens, ascending.
  std::vector<int32_t> uncertain;
  size_t accepted = 0;

  // Writes (overwrite = true) or ORs the accepted tokens into a mask of `words` words.
  void apply(uint32_t* words, size_t n_words, const std::vector<uint32_t>& usable,
             bool overwrite) const;
};

struct CompileOptions {
  PdaLimits limits;
  bool precompute = false;  // compute every state's mask now instead of on first use
};

class CompiledGrammar {
 public:
  // Builds the automaton of g for the vocabulary (kCancelled once `cancel` is raised).
  static Result<std::shared_ptr<const CompiledGrammar>> compile(
      const Grammar& g, std::shared_ptr<const TokenTable> tokens,
      const CompileOptions& options = {}, const CancelToken* cancel = nullptr);

  ~CompiledGrammar();
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const Pda& pda() const { return pda_; }
  const TokenTable& tokens() const { return *tokens_; }
  const std::shared_ptr<const TokenTable>& token_table() const { return tokens_; }
  // The bytes of its automaton (masks computed since are counted by cached_bytes()).
  size_t automaton_bytes() const;

  // The mask of a state with byte transitions, computed on first use.
  const PositionMask& mask_at(int32_t state) const;
  // Computes every state's mask (in parallel over the pool, if given).
  void precompute(ThreadPool* pool = nullptr) const;
  // How many states have their mask computed, and the bytes those masks take (a running
  // count: cheap, and safe to read while masks are being added).
  size_t cached_states() const;
  size_t cached_bytes() const;

 private:
  CompiledGrammar() = default;
  std::unique_ptr<PositionMask> compute_mask(int32_t state) const;

  Pda pda_;
  std::shared_ptr<const TokenTable> tokens_;
  mutable std::unique_ptr<std::atomic<const PositionMask*>[]> cache_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<PositionMask>> owned_;  // guarded by mu_
  mutable std::atomic<size_t> mask_bytes_{0};                 // of owned_, written under mu_
};

}  // namespace fathom::grammar
