// The prefix draft scheduler (shared/spec/algorithms.md §1.4): admission by expected tokens
// per second of the step, the early stop, and the live calibration of the confidence head.
#include "engine/draft_scheduler.h"

#include <gtest/gtest.h>

#include <vector>

namespace fathom::engine {
namespace {

const std::vector<float> kSure(5, 40.0f);  // sigmoid = 1
const std::vector<float> kHalf(5, 0.0f);   // sigmoid = 0.5

TEST(DraftScheduler, FixedVerifiesEveryDraft) {
  DraftScheduler d(DraftSchedule::kFixed, 5, {});
  EXPECT_TRUE(d.should_draft(5));
  EXPECT_EQ(d.choose(kHalf, 5), 5);
  EXPECT_EQ(d.choose(kHalf, 3), 3);  // never past max_tokens
  EXPECT_FALSE(d.should_draft(0));
}

TEST(DraftScheduler, PrefixAdmitsWhileTheStepsTokensPerSecondGrow) {
  // A flat cost (a GPU-like step: more rows cost nothing) admits every draft that may be
  // accepted; a cost linear in rows (a CPU-like step) admits a draft only if it is certain.
  DraftScheduler flat(DraftSchedule::kPrefix, 5, {1, 1, 1, 1, 1, 1});
  EXPECT_EQ(flat.choose(kHalf, 5), 5);
  DraftScheduler linear(DraftSchedule::kPrefix, 5, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(linear.choose(kHalf, 5), 0);  // (1 + 0.5) / 2 < 1 / 1
  EXPECT_EQ(linear.choose(kSure, 5), 5);  // (1 + j) / (1 + j) never drops
  // Costs that double at two rows and then stay: 1 + 0.9 tokens for 2 is a drop from 1 for 1,
  // although three drafts would give (1 + 0.9 + 0.81 + 0.73) / 2 = 1.72 > 1. The early stop
  // admits none: the paper's Algorithm 1 never looks past the first drop (its Appendix A:
  // a search without it lets the sampled first token bias the output).
  DraftScheduler step(DraftSchedule::kPrefix, 5, {1, 2, 2, 2, 2, 2});
  const std::vector<float> c90(5, 2.1972246f);  // sigmoid = 0.9
  EXPECT_NEAR(step.acceptance(1, c90[0]), 0.9, 1e-6);
  EXPECT_EQ(step.choose(c90, 5), 0);
  // Costs are made non-decreasing.
  DraftScheduler bumpy(DraftSchedule::kPrefix, 5, {1, 3, 2, 2, 2, 2});
  EXPECT_EQ(bumpy.cost_seconds(), (std::vector<double>{1, 3, 3, 3, 3, 3}));
}

TEST(DraftScheduler, AConfidenceHeadTheTargetContradictsIsCalibratedAway) {
  // Confidences of 0.5 on a cost of 1 + 0.1 per draft row: at first two drafts are admitted
  // ((1 + .5) / 1.1 = 1.36, (1.5 + .25) / 1.2 = 1.46, then (1.75 + .125) / 1.3 = 1.44 drops).
  // The target accepts none: the calibration drops, the scheduler stops drafting, and
  // explores once every 16 steps with one draft.
  DraftScheduler d(DraftSchedule::kPrefix, 5, {1, 1.1, 1.2, 1.3, 1.4, 1.5});
  EXPECT_EQ(d.choose(kHalf, 5), 2);
  for (int i = 0; i < 300; ++i) d.observe(kHalf, 5, 0);
  EXPECT_LT(d.acceptance(1, 0.0f), 0.05);
  int drafted = 0, verified = 0;
  for (int i = 0; i < 64; ++i)
    if (d.should_draft(5)) {
      ++drafted;
      verified += int(d.choose(kHalf, 5));
    }
  EXPECT_EQ(drafted, 4);
  EXPECT_EQ(verified, 4);
  // A target that accepts everything brings it back.
  for (int i = 0; i < 600; ++i) d.observe(kHalf, 5, 5);
  EXPECT_GT(d.acceptance(1, 0.0f), 0.9);
  EXPECT_TRUE(d.should_draft(5));
  EXPECT_EQ(d.choose(kHalf, 5), 5);
}

}  // namespace
}  // namespace fathom::engine
