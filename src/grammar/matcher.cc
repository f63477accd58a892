#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>

namespace fathom::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, size_t max_rollback)
    : grammar_(std::move(grammar)), pda_(&grammar_->pda()), max_rollback_(max_rollback) {
  const size_t depth = grammar_->tokens().max_token_len() + 1;
  cfg_d_.resize(depth);
  tops_d_.resize(depth);
  reset();
}

void GrammarMatcher::reset() {
  arena_.clear();
  config_ = {Top{pda_->root_start, kNoFrame}};
  expanded_ = false;
  terminated_ = false;
  history_.clear();
}

void GrammarMatcher::expand() {
  if (expanded_) return;
  ClosureInfo info = closure(*pda_, arena_, config_, tops_, scratch_);
  can_end_ = info.can_end;
  expanded_ = true;
}

bool GrammarMatcher::can_terminate() {
  if (terminated_) return false;
  expand();
  return can_end_;
}

bool GrammarMatcher::run_bytes(std::vector<Top>& config, std::string_view bytes) {
  std::vector<Top>& tops = run_a_;
  for (char c : bytes) {
    closure(*pda_, arena_, config, tops, scratch_);
    advance(*pda_, tops, uint8_t(c), run_b_);
    if (run_b_.empty()) return false;
    config.swap(run_b_);
  }
  return true;
}

void GrammarMatcher::push_history() {
  history_.push_back(Snapshot{config_, terminated_});
  if (history_.size() > max_rollback_) history_.pop_front();
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  std::vector<Top> next = config_;
  if (!run_bytes(next, bytes)) return false;
  push_history();
  config_.swap(next);
  expanded_ = false;
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (terminated_) return false;
  const TokenTable& tt = grammar_->tokens();
  for (int32_t s : tt.stop_ids()) {
    if (s == id) {
      if (!can_terminate()) return false;
      push_history();
      terminated_ = true;
      return true;
    }
  }
  if (!tt.usable(id)) return false;
  return accept_bytes(tt.bytes(id));
}

bool GrammarMatcher::rollback(size_t n) {
  if (n > history_.size()) return false;
  if (n == 0) return true;
  Snapshot& s = history_[history_.size() - n];
  config_ = std::move(s.config);
  terminated_ = s.terminated;
  history_.resize(history_.size() - n);
  expanded_ = false;
  return true;
}

void GrammarMatcher::check_uncertain(const Top& top, const PositionMask& pm, uint32_t* words) {
  const TokenTable& tt = grammar_->tokens();
  const auto& sorted = tt.sorted();
  tops_d_[0] = {top};
  size_t valid = 0;  // tops_d_[0..valid] hold the closures of prev's prefixes
  std::string_view prev;
  for (int32_t r : pm.uncertain) {
    const int32_t id = sorted[r];
    if (words[id >> 5] & (1u << (id & 31))) continue;
    std::string_view b = tt.bytes(id);
    size_t l = 0;
    const size_t lim = std::min({prev.size(), b.size(), valid});
    while (l < lim && prev[l] == b[l]) ++l;
    bool ok = true;
    for (size_t d = l + 1; d <= b.size(); ++d) {
      advance(*pda_, tops_d_[d - 1], uint8_t(b[d - 1]), cfg_d_[d]);
      if (cfg_d_[d].empty()) {
        ok = false;
        valid = d - 1;
        break;
      }
      if (d < b.size()) {
        closure(*pda_, arena_, cfg_d_[d], tops_d_[d], scratch_);
        valid = d;
      } else {
        valid = d - 1;
      }
    }
    if (ok) words[id >> 5] |= 1u << (id & 31);
    prev = b;
  }
}

void GrammarMatcher::fill_next_token_bitmask(uint32_t* words) {
  const TokenTable& tt = grammar_->tokens();
  const size_t n = tt.mask_words();
  if (terminated_) {
    std::memset(words, 0, n * sizeof(uint32_t));
    return;
  }
  expand();
  if (tops_.empty()) {
    std::memset(words, 0, n * sizeof(uint32_t));
  } else {
    // Accepted sets first (the first overwrites), then the uncertain tokens of each top.
    for (size_t i = 0; i < tops_.size(); ++i) {
      grammar_->mask_at(tops_[i].state).apply(words, n, tt.usable_mask(), i == 0);
    }
    for (const Top& t : tops_) {
      const PositionMask& pm = grammar_->mask_at(t.state);
      if (!pm.uncertain.empty()) check_uncertain(t, pm, words);
    }
  }
  if (can_end_) {
    for (int32_t s : tt.stop_ids()) words[s >> 5] |= 1u << (s & 31);
  }
}

std::string GrammarMatcher::find_jump_forward_string(size_t max_bytes) {
  std::string out;
  if (terminated_) return out;
  std::vector<Top> config = config_;
  std::vector<Top> tops, next;
  while (out.size() < max_bytes) {
    ClosureInfo info = closure(*pda_, arena_, config, tops, scratch_);
    if (info.can_end || tops.empty()) break;
    int forced = -1;
    for (const Top& t : tops) {
      int sb = pda_->states[t.state].single_byte;
      if (sb < 0 || (forced >= 0 && sb != forced)) {
        forced = -2;
        break;
      }
      forced = sb;
    }
    if (forced < 0) break;
    advance(*pda_, tops, uint8_t(forced), next);
    out += char(forced);
    config.swap(next);
  }
  return out;
}

std::vector<int32_t> GrammarMatcher::jump_forward_tokens(size_t max_tokens) {
  std::vector<int32_t> out;
  if (max_tokens == 0) return out;
  const std::string forced =
      find_jump_forward_string(max_tokens * grammar_->tokens().max_token_len());
  std::string_view rest = forced;
  while (!rest.empty() && out.size() < max_tokens) {
    const auto [id, len] = grammar_->tokens().longest_prefix(rest);
    const std::vector<int32_t>& stops = grammar_->tokens().stop_ids();
    if (id < 0 || std::find(stops.begin(), stops.end(), id) != stops.end()) break;
    out.push_back(id);
    rest.remove_prefix(len);
  }
  return out;
}

}  // namespace fathom::grammar
