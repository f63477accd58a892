// DraftScheduler: how many of a sequence's DSpark drafts a speculative step verifies.
//
// `fixed` verifies every draft. `prefix` is the paper's hardware-aware prefix scheduler
// (shared/spec/algorithms.md §1.4, Algorithm 1) for one sequence: drafts are admitted in order
// while the expected tokens per second of the step grows — with a_j = the survival probability
// of draft j (the product of the first j acceptance probabilities) and cost(n) the profiled
// seconds of a verify call of n rows, draft j is admitted while
// (1 + a_1 + ... + a_j) / cost(1 + j) >= (1 + a_1 + ... + a_{j-1}) / cost(j), stopping at the
// first drop (the early stop the paper requires). It may admit none: speculation that would
// lose on this machine is not run. The acceptance probability of draft j is the draft stages'
// confidence sigmoid(c_j) times a calibration learnt on live traffic (accepted / predicted at
// depth j, decayed), so an uncalibrated or untrained confidence head (random weights) is
// corrected by what the target actually accepts. A sequence that admits nothing still
// verifies one draft every `explore_every` steps, to keep measuring.
//
// Owned by the Engine; used by its executor thread only.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace fathom::engine {

enum class DraftSchedule { kFixed, kPrefix };

class DraftScheduler {
 public:
  static constexpr int kMaxDrafts = 8;
  // `cost_seconds[n - 1]`: a verify call of n rows (n = 1..drafts + 1), made non-decreasing.
  DraftScheduler(DraftSchedule kind, int64_t drafts, std::vector<double> cost_seconds);

  // Whether a decoding sequence's step should draft at all: false when no confidence could
  // make a draft pay (then the step is a plain decode), except every `explore_every` steps.
  bool should_draft(int64_t max_drafts);
  // Drafts to verify (0..min(max_drafts, drafts)) given the stages' confidence logits; at
  // least one on an exploring step.
  int64_t choose(std::span<const float> confidence_logits, int64_t max_drafts);
  // What a step verified: `verified` drafts with these confidence logits, `accepted` of them.
  void observe(std::span<const float> confidence_logits, int64_t verified, int64_t accepted);

  // The acceptance probability the scheduler assumes for draft `depth` (1-based) with
  // confidence logit `c`.
  double acceptance(int64_t depth, float c) const;
  const std::vector<double>& cost_seconds() const { return cost_; }

 private:
  DraftSchedule kind_;
  int64_t drafts_;
  std::vector<double> cost_;
  // Per depth: accepted and predicted acceptances (decayed sums).
  std::array<double, kMaxDrafts> accepted_{}, predicted_{};
  int64_t since_explore_ = 0;
  bool exploring_ = false;
  // Drafts admitted when the draft stages' confidence is `conf` at every depth
  int64_t admit(std::span<const float> conf, int64_t most) const;
  static constexpr int64_t explore_every = 16;
};

}  // namespace fathom::engine
