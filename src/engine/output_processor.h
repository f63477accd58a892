// OutputProcessor: turns a sequence's logits row into its next token and decides whether the
// request ends there — forced tokens (teacher forcing, then the reasoning budget's think-end
// id), sampling, logprobs when asked for, EOS, stop ids, max_tokens and the injected-error
// testing hook — the structured-output constraint (the request's grammar masks the logits
// row before sampling) and the logits controls (logit_bias, allowed_token_ids, min_tokens,
// bad_words). Plain data in and out; the engine keeps the sequences (and their
// grammar matchers) and sends the events.
//
// Owned by the engine; used by its executor thread only (it holds the sampler's scratch).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "grammar/matcher.h"

namespace fathom::engine {

class OutputProcessor {
 public:
  // The most token ids a request's bad_words may hold in all (vLLM's limit too): each sampled
  // position compares the output's tail with each of them.
  static constexpr size_t kMaxBadWordIds = 1024;
  // `eos_id` < 0: no EOS.
  OutputProcessor(int32_t eos_id, int64_t vocab) : eos_(eos_id), vocab_(vocab) {}

  // True when the request's injected error is due before its next token.
  static bool error_due(const GenerationRequest& r, int64_t generated) {
    return r.inject_error_after >= 0 && generated >= r.inject_error_after;
  }
  // The next token after `generated` from `logits` [vocab]: the next forced output token, else
  // think_end_id once the reasoning budget is spent (`think_ended`: it was generated), else a
  // sample keyed by (seed, `request_key`, position). Fills `logprob` when non-null.
  //
  // With a grammar (r.grammar, applying once think_ended when r.grammar_after_think),
  // `matcher` is the sequence's matcher slot: created here when null by replaying the
  // constrained part of `generated`. A sampled token is drawn from `logits` among the tokens
  // the grammar allows (EOS only where the grammar can end; only EOS once it has ended; EOS
  // too when nothing is allowed); with `logprob` the others are set to -inf in place, so the
  // logprobs are those of the masked distribution. Forced tokens are not masked but are fed to
  // the matcher. `premask`, when non-null, is the matcher's bitmask for its current state, computed
  // ahead (the GrammarMaskWorker); it is used instead of computing it here. `jump` >= 0: the
  // token is that one (grammar jump-forward), forced like r.forced_output's.
  //
  // The request's logits controls apply to a sampled token (request.h): the ids that
  // min_tokens and bad_words ban are at -inf and left out of the ids allowed (the grammar's,
  // intersected with allowed_token_ids), then logit_bias is added, before the penalties; the
  // logprobs are those of that distribution. A grammar that has ended still ends the output
  // (only EOS), and where the bans would leave none of the grammar's ids they are lifted.
  // Returns -1 when the controls leave no id to sample (the request fails).
  int32_t next_token(const GenerationRequest& r, uint64_t request_key,
                     std::span<const int32_t> generated, bool think_ended, float* logits,
                     TokenLogprob* logprob, std::unique_ptr<grammar::GrammarMatcher>* matcher,
                     const uint32_t* premask = nullptr, int32_t jump = -1);
  // The request's matcher for its state after `generated` (creating it in `slot` when null by
  // replaying the constrained tokens), or null while no grammar applies.
  static grammar::GrammarMatcher* matcher_for(const GenerationRequest& r,
                                              std::span<const int32_t> generated, bool think_ended,
                                              std::unique_ptr<grammar::GrammarMatcher>* slot);
  // Checks the request's logits controls (logit_bias, allowed_token_ids, min_tokens,
  // bad_words: request.h) against a vocabulary of `vocab` ids and puts them in the order
  // next_token() reads them (ids ascending, allowed_token_ids without repeats).
  // kInvalidArgument naming the field otherwise.
  static Status prepare_logit_controls(GenerationRequest* r, int64_t vocab);
  // A resumed output (`generated` so far, given by the client) checked against the request's
  // grammar where it applies: kInvalidArgument naming the first token it does not allow, or
  // saying that the output already completed it (forced positions are not asked about, as in
  // generation), and against its allowed_token_ids and bad_words.
  static Status check_resumed(const GenerationRequest& r, std::span<const int32_t> generated);
  // True when the request's grammar applies now (a grammar, and past </think> when it starts
  // there).
  static bool constrained(const GenerationRequest& r, bool think_ended) {
    return r.grammar && (!r.grammar_after_think || think_ended);
  }
  // True when the token after `generated` (g tokens) is sampled, not forced: the grammar's
  // mask is needed there (given that the grammar applies).
  static bool samples(const GenerationRequest& r, int64_t g, bool think_ended) {
    if (g < int64_t(r.forced_output.size())) return false;
    return !(r.think_end_id >= 0 && r.reasoning_budget >= 0 && !think_ended &&
             g >= r.reasoning_budget);
  }
  // Why the request ends after `generated` (its newest token last); kNone to go on.
  // `grammar_ended`: the request's grammar has accepted its EOS (kEos even with ignore_eos:
  // nothing may follow).
  FinishCause stop_cause(const GenerationRequest& r, std::span<const int32_t> generated,
                         bool grammar_ended = false) const;

 private:
  // allowed_ = the ids the matcher allows next (`premask`'s set bits, when given; only EOS once
  // it has ended). False if none is.
  bool allow(grammar::GrammarMatcher& m, const uint32_t* premask);
  // Every id of `logits` [vocab] outside allowed_ to -inf (the logprobs' distribution).
  void mask_to_allowed(float* logits) const;
  // banned_ = the ids min_tokens and bad_words ban after `generated` (ascending, unique).
  void ban(const GenerationRequest& r, std::span<const int32_t> generated);
  // allowed_ = the ids allowed (the grammar's in allowed_ when `grammar`, intersected with
  // r.allowed_token_ids) less banned_.
  void restrict(const GenerationRequest& r, bool grammar);

  const int32_t eos_;
  const int64_t vocab_;
  SamplerScratch scratch_;
  std::vector<uint32_t> mask_;    // the grammar's bitmask, reused from token to token
  std::vector<int32_t> allowed_;  // the ids it allows, ascending, reused
  std::vector<int32_t> banned_;   // the ids the controls ban at this position, reused
  std::vector<int32_t> spare_;    // restrict()'s output before it is swapped in, reused
};

}  // namespace fathom::engine
