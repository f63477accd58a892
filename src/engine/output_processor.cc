#include "engine/output_processor.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

namespace fathom::engine {

bool OutputProcessor::allow(grammar::GrammarMatcher& m, const uint32_t* premask, float* logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  allowed_.clear();
  if (m.is_terminated()) {  // the grammar has ended: only EOS
    if (eos_ < 0 || eos_ >= vocab_) return false;
    allowed_.push_back(eos_);
  } else {
    const size_t words = m.mask_words();
    const uint32_t* mask = premask;
    if (!mask) {
      mask_.resize(words);
      m.fill_next_token_bitmask(mask_.data());
      mask = mask_.data();
    }
    for (size_t w = 0; w < words && int64_t(w * 32) < vocab_; ++w) {
      uint32_t bits = mask[w];
      if (int64_t(w * 32 + 32) > vocab_) bits &= (1u << (vocab_ - int64_t(w * 32))) - 1;
      while (bits) {
        allowed_.push_back(int32_t(w * 32) + std::countr_zero(bits));
        bits &= bits - 1;
      }
    }
  }
  if (logits) {  // the masked distribution, for the logprobs
    size_t k = 0;
    for (int64_t v = 0; v < vocab_; ++v)
      if (k < allowed_.size() && allowed_[k] == v)
        ++k;
      else
        logits[v] = kNegInf;
  }
  return !allowed_.empty();
}

namespace {

// Where the grammar's part of `generated` starts: after </think> when it starts there (none
// of it before that token), else at 0.
size_t constrained_from(const GenerationRequest& r, std::span<const int32_t> generated) {
  if (!r.grammar_after_think) return 0;
  auto it = std::find(generated.begin(), generated.end(), r.think_end_id);
  return it == generated.end() ? generated.size() : size_t(it - generated.begin()) + 1;
}

}  // namespace

grammar::GrammarMatcher* OutputProcessor::matcher_for(
    const GenerationRequest& r, std::span<const int32_t> generated, bool think_ended,
    std::unique_ptr<grammar::GrammarMatcher>* slot) {
  if (!slot || !constrained(r, think_ended)) return nullptr;
  if (!*slot) {
    // New, forked or re-admitted: the state after the constrained tokens generated so far.
    *slot = std::make_unique<grammar::GrammarMatcher>(r.grammar);
    for (size_t i = constrained_from(r, generated); i < generated.size(); ++i)
      (*slot)->accept_token(generated[i]);
  }
  return slot->get();
}

Status OutputProcessor::check_resumed(const GenerationRequest& r,
                                      std::span<const int32_t> generated) {
  if (!r.grammar) return Status();
  grammar::GrammarMatcher m(r.grammar);
  for (size_t i = constrained_from(r, generated); i < generated.size(); ++i) {
    if (m.is_terminated())
      return invalid_argument("the resumed output completed its grammar at token " +
                              std::to_string(i - 1) + ": nothing follows it");
    if (!m.accept_token(generated[i]) && i >= r.forced_output.size())
      return invalid_argument("the resumed output's token " + std::to_string(i) + " (id " +
                              std::to_string(generated[i]) + ") is not allowed by its grammar");
  }
  if (m.is_terminated())
    return invalid_argument("the resumed output completed its grammar: nothing follows it");
  return Status();
}

int32_t OutputProcessor::next_token(const GenerationRequest& r, uint64_t request_key,
                                    std::span<const int32_t> generated, bool think_ended,
                                    float* logits, TokenLogprob* logprob,
                                    std::unique_ptr<grammar::GrammarMatcher>* matcher,
                                    const uint32_t* premask, int32_t jump) {
  const int64_t g = int64_t(generated.size());
  grammar::GrammarMatcher* m = matcher_for(r, generated, think_ended, matcher);
  int32_t tok = 0;
  if (jump >= 0) {
    tok = jump;
  } else if (g < int64_t(r.forced_output.size())) {
    tok = r.forced_output[size_t(g)];
  } else if (!samples(r, g, think_ended)) {
    tok = r.think_end_id;  // the reasoning budget is spent
  } else if (m && !allow(*m, premask, logprob ? logits : nullptr) && eos_ >= 0) {
    tok = eos_;  // nothing can follow (cannot happen with a grammar that can end)
  } else {
    tok = sample_token(logits, vocab_, r.sampling, r.prompt, generated, request_key,
                       uint64_t(r.prompt.size()) + uint64_t(g), scratch_,
                       m ? std::span<const int32_t>(allowed_) : std::span<const int32_t>());
  }
  if (m) m->accept_token(tok);  // forced tokens too; a rejected one leaves the state as it was
  if (logprob)
    token_logprob(logits, vocab_, r.sampling, r.prompt, generated, tok, r.top_logprobs, scratch_,
                  logprob);
  return tok;
}

FinishCause OutputProcessor::stop_cause(const GenerationRequest& r,
                                        std::span<const int32_t> generated,
                                        bool grammar_ended) const {
  if (generated.empty()) return FinishCause::kNone;
  const int32_t tok = generated.back();
  if (tok == eos_ && (!r.ignore_eos || grammar_ended)) return FinishCause::kEos;
  if (std::find(r.stop_ids.begin(), r.stop_ids.end(), tok) != r.stop_ids.end())
    return FinishCause::kStopToken;
  if (int64_t(generated.size()) >= r.max_tokens) return FinishCause::kLength;
  return FinishCause::kNone;
}

}  // namespace fathom::engine
