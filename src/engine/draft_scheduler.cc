#include "engine/draft_scheduler.h"

#include <algorithm>
#include <cmath>

namespace fathom::engine {
namespace {
double sigmoid(float c) { return 1.0 / (1.0 + std::exp(-double(c))); }
// Decay of the calibration sums per observation: about the last 200 steps count.
constexpr double kDecay = 0.995;
// The prior: as if 8 predictions at each depth had been accepted as predicted.
constexpr double kPrior = 8.0;
}  // namespace

DraftScheduler::DraftScheduler(DraftSchedule kind, int64_t drafts, std::vector<double> cost_seconds)
    : kind_(kind),
      drafts_(std::clamp<int64_t>(drafts, 0, kMaxDrafts)),
      cost_(std::move(cost_seconds)) {
  for (size_t i = 1; i < cost_.size(); ++i) cost_[i] = std::max(cost_[i], cost_[i - 1]);
  accepted_.fill(kPrior / 2);
  predicted_.fill(kPrior / 2);
}

double DraftScheduler::acceptance(int64_t depth, float c) const {
  const size_t d = size_t(std::clamp<int64_t>(depth, 1, kMaxDrafts) - 1);
  return std::clamp(sigmoid(c) * accepted_[d] / std::max(predicted_[d], 1e-9), 0.0, 1.0);
}

int64_t DraftScheduler::admit(std::span<const float> conf, int64_t most) const {
  auto cost = [&](int64_t rows) {
    return cost_.empty() ? double(rows)
                         : cost_[size_t(std::min<int64_t>(rows, int64_t(cost_.size())) - 1)];
  };
  double survive = 1.0, expected = 1.0;
  double best = expected / cost(1);
  int64_t k = 0;
  for (int64_t j = 1; j <= most; ++j) {
    survive *= acceptance(j, conf[size_t(j - 1)]);
    const double next = (expected + survive) / cost(1 + j);
    if (next < best) break;  // the early stop: never look past the first drop
    expected += survive;
    best = next;
    k = j;
  }
  return k;
}

bool DraftScheduler::should_draft(int64_t max_drafts) {
  exploring_ = false;
  const int64_t most = std::min(max_drafts, drafts_);
  if (most <= 0) return false;
  if (kind_ == DraftSchedule::kFixed) return true;
  const std::array<float, kMaxDrafts> certain = [] {
    std::array<float, kMaxDrafts> a;
    a.fill(40.0f);  // sigmoid = 1
    return a;
  }();
  if (admit(certain, most) > 0) return true;
  if (++since_explore_ < explore_every) return false;
  since_explore_ = 0;
  exploring_ = true;
  return true;
}

int64_t DraftScheduler::choose(std::span<const float> conf, int64_t max_drafts) {
  const int64_t most = std::min({max_drafts, drafts_, int64_t(conf.size())});
  if (most <= 0) return 0;
  if (kind_ == DraftSchedule::kFixed) return most;
  const int64_t k = admit(conf, most);
  return exploring_ ? std::max<int64_t>(k, 1) : k;
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
