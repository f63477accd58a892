#include "engine/draft_scheduler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

namespace fathom::engine {
namespace {
double sigmoid(float c) { return 1.0 / (1.0 + std::exp(-double(c))); }
// Decay of the calibration sums per observation: about the last 200 steps count.
constexpr double kDecay = 0.995;
// The prior: as if 8 predictions at each depth had been accepted as predicted.
constexpr double kPrior = 8.0;
// The most of the steps' time exploring may cost while drafting does not pay.
constexpr double kExploreShare = 0.02;

using CostPoint = DraftScheduler::CostPoint;

// Points sorted by rows (the larger of two at one row count), seconds made non-decreasing.
std::vector<CostPoint> monotonic(std::vector<CostPoint> in) {
  std::sort(in.begin(), in.end(),
            [](const CostPoint& a, const CostPoint& b) { return a.rows < b.rows; });
  std::vector<CostPoint> out;
  for (const CostPoint& p : in) {
    if (p.rows < 1) continue;
    if (!out.empty() && out.back().rows == p.rows) {
      out.back().seconds = std::max(out.back().seconds, p.seconds);
      continue;
    }
    out.push_back(p);
  }
  for (size_t i = 1; i < out.size(); ++i)
    out[i].seconds = std::max(out[i].seconds, out[i - 1].seconds);
  return out;
}

// The seconds at `x` (>= 1): linear between points, the first point's below it, the last two
// points' slope past the last (a single point: proportional).
double interpolate(const std::vector<CostPoint>& p, int64_t x) {
  x = std::max<int64_t>(x, 1);
  if (x <= p.front().rows) return p.front().seconds;
  for (size_t i = 1; i < p.size(); ++i)
    if (x <= p[i].rows) {
      const CostPoint &a = p[i - 1], &b = p[i];
      return a.seconds + (b.seconds - a.seconds) * double(x - a.rows) / double(b.rows - a.rows);
    }
  const CostPoint& last = p.back();
  const double slope = p.size() >= 2 ? (last.seconds - p[p.size() - 2].seconds) /
                                           double(last.rows - p[p.size() - 2].rows)
                                     : last.seconds / double(last.rows);
  return last.seconds + slope * double(x - last.rows);
}
}  // namespace

DraftScheduler::DraftScheduler(DraftSchedule kind, int64_t drafts, std::vector<CostPoint> cost,
                               std::vector<CostPoint> draft_cost)
    : kind_(kind),
      drafts_(std::clamp<int64_t>(drafts, 0, kMaxDrafts)),
      cost_(monotonic(std::move(cost))),
      draft_cost_(monotonic(std::move(draft_cost))) {
  accepted_.fill(kPrior / 2);
  predicted_.fill(kPrior / 2);
}

double DraftScheduler::cost(int64_t rows) const {
  return cost_.empty() ? double(std::max<int64_t>(rows, 1)) : interpolate(cost_, rows);
}

double DraftScheduler::draft_cost(int64_t sequences) const {
  return draft_cost_.empty() || sequences <= 0 ? 0.0 : interpolate(draft_cost_, sequences);
}

double DraftScheduler::acceptance(int64_t depth, float c) const {
  const size_t d = size_t(std::clamp<int64_t>(depth, 1, kMaxDrafts) - 1);
  return std::clamp(sigmoid(c) * accepted_[d] / std::max(predicted_[d], 1e-9), 0.0, 1.0);
}

int64_t DraftScheduler::admit_prefix(std::span<const double> sorted, int64_t tokens,
                                     int64_t rows) const {
  double expected = double(tokens);
  double best = expected / cost(rows);
  int64_t k = 0;
  for (double a : sorted) {
    const double next = (expected + a) / cost(rows + k + 1);
    if (next < best) break;  // the early stop: never look past the first drop
    expected += a;
    best = next;
    ++k;
  }
  return k;
}

int64_t DraftScheduler::best_capacity(std::span<const double> sorted, int64_t tokens,
                                      int64_t rows) const {
  double sum = double(tokens);
  double best = sum / cost(rows);
  int64_t best_k = 0;
  for (size_t k = 0; k < sorted.size(); ++k) {
    sum += sorted[k];
    const double v = sum / cost(rows + int64_t(k) + 1);
    if (v > best) {  // a global search: past drops too
      best = v;
      best_k = int64_t(k) + 1;
    }
  }
  return best_k;
}

bool DraftScheduler::should_draft(int64_t tokens, int64_t rows, int64_t most, int64_t sequences) {
  exploring_ = false;
  most = std::min(most, drafts_);
  if (most <= 0 || sequences <= 0) return false;
  if (kind_ == DraftSchedule::kFixed) return true;
  // Whether some number of these survival values (largest first) repays the drafting and
  // their rows.
  const double without = double(tokens) / cost(rows), drafting = draft_cost(sequences);
  auto repays = [&](std::span<const double> sorted) {
    double sum = double(tokens);
    for (size_t k = 0; k < sorted.size(); ++k) {
      sum += sorted[k];
      if (sum / (drafting + cost(rows + int64_t(k) + 1)) > without) return true;
    }
    return false;
  };
  // Every drafting sequence's drafts as the calibrated head would rate them were it certain.
  std::vector<double> certain;
  double survive = 1.0;
  for (int64_t j = 1; j <= most; ++j) {
    survive *= acceptance(j, 40.0f);
    certain.insert(certain.end(), size_t(sequences), survive);
  }
  bool pays = repays(certain);
  // Drafting is paid before any draft is chosen, so it must be repaid by the drafts the step
  // is likely to verify: those of the last drafted step (for stale-global, the drafted step
  // two before, which sizes this one: variant B), not a certain head's.
  if (pays && stale_steps_ > 0)
    pays = repays(survival_values(kind_ == DraftSchedule::kStaleGlobal ? sized() : stale_[0]));
  if (pays) return true;
  // Exploring costs a drafting: at most kExploreShare of the steps' time, every
  // explore_every steps at the most often.
  const int64_t every =
      std::max<int64_t>(explore_every, int64_t(std::ceil(drafting / (kExploreShare * cost(rows)))));
  if (++since_explore_ < every) return false;
  since_explore_ = 0;
  exploring_ = true;
  return true;
}

const DraftScheduler::StepConfidences& DraftScheduler::sized() const {
  return stale_steps_ >= 2 ? stale_[1] : stale_[0];
}

std::vector<double> DraftScheduler::survival_values(const StepConfidences& step) const {
  std::vector<double> out;
  for (const std::vector<float>& conf : step) {
    double survive = 1.0;
    for (size_t j = 0; j < conf.size(); ++j)
      out.push_back(survive *= acceptance(int64_t(j) + 1, conf[j]));
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

std::vector<int64_t> DraftScheduler::choose(std::span<const Candidate> candidates, int64_t tokens,
                                            int64_t rows) {
  std::vector<int64_t> out(candidates.size(), 0);
  // Every candidate draft's survival probability, with its sequence.
  std::vector<std::pair<double, size_t>> live;
  StepConfidences step;
  for (size_t r = 0; r < candidates.size(); ++r) {
    const Candidate& c = candidates[r];
    const int64_t most = std::min({c.most, drafts_, int64_t(c.confidence.size())});
    if (kind_ == DraftSchedule::kFixed) {
      out[r] = std::max<int64_t>(most, 0);
      continue;
    }
    if (most > 0) step.emplace_back(c.confidence.begin(), c.confidence.begin() + most);
    double survive = 1.0;
    for (int64_t j = 1; j <= most; ++j)
      live.emplace_back(survive *= acceptance(j, c.confidence[size_t(j - 1)]), r);
  }
  if (kind_ == DraftSchedule::kFixed) return out;
  // Largest first; equal values keep their order, so each sequence's drafts stay in order.
  std::stable_sort(live.begin(), live.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<double> values;
  values.reserve(live.size());
  for (const auto& [a, r] : live) values.push_back(a);
  int64_t k = 0;
  if (kind_ == DraftSchedule::kPrefix) {
    k = admit_prefix(values, tokens, rows);
  } else {
    // The capacity from the step two before (while there is none: the newest there is, or
    // this step's own).
    k = std::min<int64_t>(
        best_capacity(stale_steps_ > 0 ? survival_values(sized()) : values, tokens, rows),
        int64_t(values.size()));
  }
  stale_[1] = std::move(stale_[0]);
  stale_[0] = std::move(step);
  ++stale_steps_;
  for (int64_t i = 0; i < k; ++i) ++out[live[size_t(i)].second];
  if (exploring_)
    for (size_t r = 0; r < candidates.size(); ++r)
      if (std::min({candidates[r].most, drafts_, int64_t(candidates[r].confidence.size())}) > 0)
        out[r] = std::max<int64_t>(out[r], 1);
  return out;
}

void DraftScheduler::observe(std::span<const float> conf, int64_t verified, int64_t accepted) {
  for (int64_t j = 0; j < std::min<int64_t>({verified, int64_t(conf.size()), kMaxDrafts}); ++j) {
    // Draft j+1 was reached when every draft before it was accepted.
    if (j > accepted) break;
    accepted_[size_t(j)] = accepted_[size_t(j)] * kDecay + (j < accepted ? 1.0 : 0.0);
    predicted_[size_t(j)] = predicted_[size_t(j)] * kDecay + sigmoid(conf[size_t(j)]);
  }
}

}  // namespace fathom::engine
