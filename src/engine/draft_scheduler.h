// DraftScheduler: how many of each decoding sequence's DSpark drafts a speculative step
// verifies (shared/spec/algorithms.md §1.4–1.5). A step runs all its rows — every sequence's
// next token, the drafts admitted, other sequences' rows — in one pass over the weights, so
// the choice is global: a draft is worth its row when the step's expected tokens per second
// grows with it.
//
// With a_{r,j} = the survival probability of sequence r's draft j (the product of its first j
// acceptance probabilities), `tokens` the tokens the step emits without drafts and `rows` the
// rows its pass runs without them, and cost(B) the profiled seconds of a pass of B rows:
//   - `fixed` verifies every draft;
//   - `prefix` is the paper's Algorithm 1: every (r, j) in order of a, admitted while
//     (tokens + Σ a) / cost(rows + admitted) grows, stopping at the first drop (the early stop
//     the paper requires);
//   - `stale-global` is the paper's production variant B: the step's capacity K is the
//     argmax over K of (tokens + the K largest a of the step two before) / cost(rows + K) — a
//     global search without the early stop, from confidences two steps old, as an
//     asynchronous scheduler must size a step before the previous one ends — and the step
//     then verifies the K drafts of largest live a.
// a_{r,j} is non-increasing in j, so both admit a prefix of each sequence's drafts. Any
// choice leaves the output unchanged (a draft is kept only while it equals the token the
// request samples without speculation): the scheduler decides speed, never tokens.
//
// The acceptance probability of draft j is the draft stages' confidence sigmoid(c_j) times a
// calibration learnt on live traffic (accepted / predicted at depth j, decayed), so an
// uncalibrated or untrained confidence head (random weights) is corrected by what the target
// actually accepts. Drafting has its own cost: the stages run for every drafting sequence
// before any draft is chosen. When no confidence (the calibrated certainty) could repay that
// and the verify rows at the step's size, or when the survival values of the last drafted
// step (for `stale-global`, of the drafted step two before, which sizes the step) would not,
// the step does not draft at all, except to explore — every `explore_every` steps, or less
// often when drafting is dear (at most 2% of the steps' time) — when each sequence verifies
// at least one draft, to keep measuring.
//
// Owned by the Engine; used by its executor thread only.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace fathom::engine {

enum class DraftSchedule { kFixed, kPrefix, kStaleGlobal };

class DraftScheduler {
 public:
  static constexpr int kMaxDrafts = 8;
  // A profiled pass: `rows` rows took `seconds`.
  struct CostPoint {
    int64_t rows = 0;
    double seconds = 0;
  };
  // A sequence that may draft this step: its drafts' confidence logits and the most drafts it
  // may verify.
  struct Candidate {
    std::span<const float> confidence;
    int64_t most = 0;
  };

  // `cost`: passes by rows; `draft_cost`: the draft stages run for `rows` sequences at once
  // (any order; made increasing in rows and non-decreasing in seconds), interpolated linearly
  // between points and extended past the last by its last slope. With no pass points a pass
  // costs its rows (seconds = rows); with no draft points drafting costs nothing.
  DraftScheduler(DraftSchedule kind, int64_t drafts, std::vector<CostPoint> cost,
                 std::vector<CostPoint> draft_cost = {});

  // Whether a step emitting `tokens` tokens in `rows` rows without drafts should draft at all,
  // with `sequences` sequences drafting at most `most` each: false when even drafts the
  // calibrated head is certain of would not repay the drafting and their rows, except every
  // `explore_every` steps.
  bool should_draft(int64_t tokens, int64_t rows, int64_t most, int64_t sequences = 1);
  // Drafts each candidate verifies (0..min(most, drafts, its confidences)); at least one each
  // on an exploring step.
  std::vector<int64_t> choose(std::span<const Candidate> candidates, int64_t tokens, int64_t rows);
  // What a sequence's step verified: `verified` drafts with these confidence logits, `accepted`
  // of them.
  void observe(std::span<const float> confidence_logits, int64_t verified, int64_t accepted);

  // The acceptance probability the scheduler assumes for draft `depth` (1-based) with
  // confidence logit `c`.
  double acceptance(int64_t depth, float c) const;
  // Seconds of a pass of `rows` rows, and of drafting for `sequences` sequences.
  double cost(int64_t rows) const;
  double draft_cost(int64_t sequences) const;
  const std::vector<CostPoint>& cost_points() const { return cost_; }
  const std::vector<CostPoint>& draft_cost_points() const { return draft_cost_; }

 private:
  // Drafts admitted from a's sorted by value (largest first) for a step of `tokens`, `rows`.
  int64_t admit_prefix(std::span<const double> sorted, int64_t tokens, int64_t rows) const;
  int64_t best_capacity(std::span<const double> sorted, int64_t tokens, int64_t rows) const;
  // A drafted step's candidates: each sequence's confidence logits, up to its most drafts.
  using StepConfidences = std::vector<std::vector<float>>;
  // stale-global: the step that sizes this one (the drafted step two before, or the one
  // before while there is only one); needs stale_steps_ > 0.
  const StepConfidences& sized() const;
  // A step's survival values under today's calibration, sorted (largest first).
  std::vector<double> survival_values(const StepConfidences& step) const;

  DraftSchedule kind_;
  int64_t drafts_;
  std::vector<CostPoint> cost_, draft_cost_;
  // Per depth: accepted and predicted acceptances (decayed sums).
  std::array<double, kMaxDrafts> accepted_{}, predicted_{};
  int64_t since_explore_ = 0;
  bool exploring_ = false;
  // The last two drafted steps' candidates; stale_[1] is the older.
  std::array<StepConfidences, 2> stale_;
  int64_t stale_steps_ = 0;
  static constexpr int64_t explore_every = 16;
};

}  // namespace fathom::engine
