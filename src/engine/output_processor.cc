#include "engine/output_processor.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

namespace fathom::engine {

bool OutputProcessor::allow(grammar::GrammarMatcher& m, const uint32_t* premask) {
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
  return !allowed_.empty();
}

void OutputProcessor::mask_to_allowed(float* logits) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  size_t k = 0;
  for (int64_t v = 0; v < vocab_; ++v)
    if (k < allowed_.size() && allowed_[k] == v)
      ++k;
    else
      logits[v] = kNegInf;
}

namespace {

// True when `ids` ends with `tail` (a bad word's ids before its last, or all of them).
bool ends_with(std::span<const int32_t> ids, std::span<const int32_t> tail) {
  return tail.size() <= ids.size() &&
         std::equal(tail.begin(), tail.end(), ids.end() - ptrdiff_t(tail.size()));
}

}  // namespace

void OutputProcessor::ban(const GenerationRequest& r, std::span<const int32_t> generated) {
  banned_.clear();
  const size_t g = generated.size();
  if (int64_t(g) < r.min_tokens) {
    if (eos_ >= 0 && eos_ < vocab_) banned_.push_back(eos_);
    banned_.insert(banned_.end(), r.stop_ids.begin(), r.stop_ids.end());
  }
  for (const std::vector<int32_t>& w : r.bad_words)
    if (ends_with(generated, std::span(w).first(w.size() - 1))) banned_.push_back(w.back());
  if (banned_.size() > 1) {
    std::sort(banned_.begin(), banned_.end());
    banned_.erase(std::unique(banned_.begin(), banned_.end()), banned_.end());
  }
}

void OutputProcessor::restrict(const GenerationRequest& r, bool grammar) {
  std::span<const int32_t> from =
      grammar ? std::span<const int32_t>(allowed_) : r.allowed_token_ids;
  spare_.clear();
  auto b = banned_.begin();
  auto a = r.allowed_token_ids.begin();
  for (int32_t t : from) {
    if (grammar && !r.allowed_token_ids.empty()) {
      while (a != r.allowed_token_ids.end() && *a < t) ++a;
      if (a == r.allowed_token_ids.end()) break;
      if (*a != t) continue;
    }
    while (b != banned_.end() && *b < t) ++b;
    if (b != banned_.end() && *b == t) continue;
    spare_.push_back(t);
  }
  allowed_.swap(spare_);
}

Status OutputProcessor::prepare_logit_controls(GenerationRequest* r, int64_t vocab) {
  auto outside = [&](int32_t t) { return t < 0 || int64_t(t) >= vocab; };
  std::sort(r->logit_bias.begin(), r->logit_bias.end());
  for (size_t i = 0; i < r->logit_bias.size(); ++i) {
    const auto [t, b] = r->logit_bias[i];
    if (outside(t))
      return invalid_argument("logit_bias: token id " + std::to_string(t) +
                              " is outside the vocabulary (" + std::to_string(vocab) + " ids)");
    if (!(b >= -100.0f && b <= 100.0f))
      return invalid_argument("logit_bias: the bias of token id " + std::to_string(t) +
                              " must be in [-100, 100]");
    if (i > 0 && r->logit_bias[i - 1].first == t)
      return invalid_argument("logit_bias: token id " + std::to_string(t) + " appears twice");
  }
  for (int32_t t : r->allowed_token_ids)
    if (outside(t))
      return invalid_argument("allowed_token_ids: token id " + std::to_string(t) +
                              " is outside the vocabulary (" + std::to_string(vocab) + " ids)");
  std::sort(r->allowed_token_ids.begin(), r->allowed_token_ids.end());
  r->allowed_token_ids.erase(std::unique(r->allowed_token_ids.begin(), r->allowed_token_ids.end()),
                             r->allowed_token_ids.end());
  if (r->min_tokens < 0 || r->min_tokens > r->max_tokens)
    return invalid_argument("min_tokens: must be in [0, max_tokens] (max_tokens is " +
                            std::to_string(r->max_tokens) + ")");
  size_t bad_ids = 0;
  for (const std::vector<int32_t>& w : r->bad_words) {
    if (w.empty()) return invalid_argument("bad_words: a word with no tokens");
    if ((bad_ids += w.size()) > kMaxBadWordIds)
      return invalid_argument("bad_words: more than " + std::to_string(kMaxBadWordIds) +
                              " token ids in all");
    for (int32_t t : w)
      if (outside(t))
        return invalid_argument("bad_words: token id " + std::to_string(t) +
                                " is outside the vocabulary (" + std::to_string(vocab) + " ids)");
  }
  return Status();
}

namespace {

// Where the grammar's part of `generated` starts: after </think> when it starts there (none
// of it before that token), else at 0.
size_t constrained_from(const GenerationRequest& r, std::span<const int32_t> generated) {
  if (!r.grammar_after_think) return 0;
  auto it = std::find(generated.begin(), generated.end(), r.think_end_id);
  return it == generated.end() ? generated.size() : size_t(it - generated.begin()) + 1;
}

// A resumed output checked against allowed_token_ids and bad_words (forced positions, the
// reasoning budget's think-end id among them, not asked about).
Status check_resumed_controls(const GenerationRequest& r, std::span<const int32_t> generated) {
  const auto& allowed = r.allowed_token_ids;
  if (allowed.empty() && r.bad_words.empty()) return Status();
  bool think_ended = false;
  for (size_t i = 0; i < generated.size(); ++i) {
    const int32_t t = generated[i];
    const bool sampled = OutputProcessor::samples(r, int64_t(i), think_ended);
    think_ended |= r.think_end_id >= 0 && t == r.think_end_id;
    if (!sampled) continue;
    if (!allowed.empty() && !std::binary_search(allowed.begin(), allowed.end(), t))
      return invalid_argument("the resumed output's token " + std::to_string(i) + " (id " +
                              std::to_string(t) + ") is not in allowed_token_ids");
    for (const std::vector<int32_t>& w : r.bad_words)
      if (ends_with(generated.first(i + 1), w))
        return invalid_argument("the resumed output's token " + std::to_string(i) + " (id " +
                                std::to_string(t) + ") completes one of its bad_words");
  }
  return Status();
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
  if (Status st = check_resumed_controls(r, generated); !st.is_ok()) return st;
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
  LogitAdjust adjust;  // the controls, for a sampled token
  if (jump >= 0) {
    tok = jump;
  } else if (g < int64_t(r.forced_output.size())) {
    tok = r.forced_output[size_t(g)];
  } else if (!samples(r, g, think_ended)) {
    tok = r.think_end_id;  // the reasoning budget is spent
  } else if (m && !allow(*m, premask) && eos_ >= 0) {
    tok = eos_;  // nothing can follow (cannot happen with a grammar that can end)
    if (logprob) mask_to_allowed(logits);
  } else {
    // A grammar that has ended allows only EOS, whatever the controls say.
    const bool ended = m && m->is_terminated();
    const bool listed = m || !r.allowed_token_ids.empty();
    banned_.clear();
    if (!ended) {
      ban(r, generated);
      // allowed_ = the grammar's ids, or allowed_token_ids, less the bans.
      if (listed && (!m || !banned_.empty() || !r.allowed_token_ids.empty()))
        restrict(r, m != nullptr);
      // The grammar outranks the bans: where they would leave none of its ids (min_tokens
      // past the end of a JSON answer), they are lifted. restrict() left the grammar's ids in
      // spare_.
      if (m && allowed_.empty() && !banned_.empty()) {
        allowed_.swap(spare_);
        banned_.clear();
        if (!r.allowed_token_ids.empty()) restrict(r, true);
      }
    }
    if (listed ? allowed_.empty() : int64_t(banned_.size()) >= vocab_) return -1;
    if (logprob && listed) mask_to_allowed(logits);
    adjust = LogitAdjust{r.logit_bias, banned_};
    tok = sample_token(logits, vocab_, r.sampling, r.prompt, generated, request_key,
                       uint64_t(r.prompt.size()) + uint64_t(g), scratch_,
                       listed ? std::span<const int32_t>(allowed_) : std::span<const int32_t>(),
                       adjust);
  }
  if (m) m->accept_token(tok);  // forced tokens too; a rejected one leaves the state as it was
  if (logprob)
    token_logprob(logits, vocab_, r.sampling, r.prompt, generated, tok, r.top_logprobs, scratch_,
                  logprob, adjust);
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
