// The draft schedulers (shared/spec/algorithms.md §1.4–1.5): the prefix scheduler's admission
// by the step's expected tokens per second with the early stop (the paper's Algorithm 1 over
// all the step's drafts), the stale-global scheduler's capacity from confidences two steps old
// by a search without the early stop, filled by live confidence, the cost table's
// interpolation, and the live calibration of the confidence head.
#include "engine/draft_scheduler.h"

#include <gtest/gtest.h>

#include <vector>

namespace fathom::engine {
namespace {

using Cost = std::vector<DraftScheduler::CostPoint>;
const std::vector<float> kSure(5, 40.0f);         // sigmoid = 1
const std::vector<float> kHalf(5, 0.0f);          // sigmoid = 0.5
const std::vector<float> kNinety(5, 2.1972246f);  // sigmoid = 0.9

// Costs by rows 1..n.
Cost costs(std::vector<double> seconds) {
  Cost c;
  for (size_t i = 0; i < seconds.size(); ++i) c.push_back({int64_t(i) + 1, seconds[i]});
  return c;
}

// One sequence's step (one token, one row without drafts).
int64_t choose_one(DraftScheduler& d, const std::vector<float>& conf, int64_t most) {
  const DraftScheduler::Candidate c{conf, most};
  return d.choose(std::span(&c, 1), 1, 1).at(0);
}

TEST(DraftScheduler, FixedVerifiesEveryDraft) {
  DraftScheduler d(DraftSchedule::kFixed, 5, {});
  EXPECT_TRUE(d.should_draft(1, 1, 5));
  EXPECT_EQ(choose_one(d, kHalf, 5), 5);
  EXPECT_EQ(choose_one(d, kHalf, 3), 3);  // never past max_tokens
  EXPECT_FALSE(d.should_draft(1, 1, 0));
}

TEST(DraftScheduler, CostsAreInterpolatedAndExtendedByTheLastSlope) {
  DraftScheduler d(DraftSchedule::kPrefix, 5, {{12, 2.0}, {1, 1.0}, {6, 1.5}, {6, 1.2}, {24, 1.9}});
  // Sorted by rows, the larger of two points at one row count, then made non-decreasing.
  ASSERT_EQ(d.cost_points().size(), 4u);
  EXPECT_EQ(d.cost_points()[1].rows, 6);
  EXPECT_DOUBLE_EQ(d.cost_points()[1].seconds, 1.5);
  EXPECT_DOUBLE_EQ(d.cost_points()[3].seconds, 2.0);  // 1.9 after 2.0
  EXPECT_DOUBLE_EQ(d.cost(1), 1.0);
  EXPECT_DOUBLE_EQ(d.cost(0), 1.0);
  EXPECT_DOUBLE_EQ(d.cost(3), 1.2);   // 1 + 0.5 * 2/5
  EXPECT_DOUBLE_EQ(d.cost(9), 1.75);  // halfway from 6 to 12
  EXPECT_DOUBLE_EQ(d.cost(30), 2.0);  // flat after the last two points
  DraftScheduler one(DraftSchedule::kPrefix, 5, {{4, 2.0}});
  EXPECT_DOUBLE_EQ(one.cost(8), 4.0);  // proportional past a single point
  DraftScheduler none(DraftSchedule::kPrefix, 5, {});
  EXPECT_DOUBLE_EQ(none.cost(7), 7.0);
}

TEST(DraftScheduler, PrefixAdmitsWhileTheStepsTokensPerSecondGrow) {
  // A flat cost (a GPU-like step: more rows cost nothing) admits every draft that may be
  // accepted; a cost linear in rows (a CPU-like step) admits a draft only if it is certain.
  DraftScheduler flat(DraftSchedule::kPrefix, 5, costs({1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(choose_one(flat, kHalf, 5), 5);
  DraftScheduler linear(DraftSchedule::kPrefix, 5, costs({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(choose_one(linear, kHalf, 5), 0);  // (1 + 0.5) / 2 < 1 / 1
  EXPECT_EQ(choose_one(linear, kSure, 5), 5);  // (1 + j) / (1 + j) never drops
  // Costs that double at two rows and then stay: 1 + 0.9 tokens for 2 is a drop from 1 for 1,
  // although three drafts would give (1 + 0.9 + 0.81 + 0.73) / 2 = 1.72 > 1. The early stop
  // admits none: the paper's Algorithm 1 never looks past the first drop (its Appendix A:
  // a search without it lets the sampled first token bias the output).
  DraftScheduler step(DraftSchedule::kPrefix, 5, costs({1, 2, 2, 2, 2, 2}));
  EXPECT_NEAR(step.acceptance(1, kNinety[0]), 0.9, 1e-6);
  EXPECT_EQ(choose_one(step, kNinety, 5), 0);
}

TEST(DraftScheduler, PrefixAdmitsTheStepsMostLikelyDraftsAcrossSequences) {
  // A pass of 4 rows without drafts (4 sequences' next tokens) costs 1, each row more 0.1:
  // drafts are admitted in order of survival while (4 + their sum) / (1 + 0.1 * admitted)
  // grows. Sequence 0 is sure, 1 at 0.9, 2 at 0.5, 3 has no drafts left.
  Cost c;
  for (int64_t r = 1; r <= 40; ++r) c.push_back({r, 1.0 + 0.1 * double(r - 4)});
  DraftScheduler d(DraftSchedule::kPrefix, 5, c);
  const std::vector<DraftScheduler::Candidate> cands = {
      {kSure, 5}, {kNinety, 5}, {kHalf, 5}, {kHalf, 0}};
  const std::vector<int64_t> k = d.choose(cands, 4, 4);
  // Rates: 4, then +1 x5 (sure) -> 9/1.5 = 6; 0.9 -> 9.9/1.6 = 6.19; 0.81 -> 10.71/1.7 = 6.3;
  // 0.729 -> 11.44/1.8 = 6.36; 0.656 -> 12.09/1.9 = 6.37; 0.59 -> 12.68/2.0 = 6.34: a drop.
  EXPECT_EQ(k, (std::vector<int64_t>{5, 4, 0, 0}));
}

TEST(DraftScheduler, StaleGlobalSizesTheStepFromConfidencesTwoStepsOld) {
  // Cost 1 up to 8 rows, then 1 + 0.5 per row: a staircase. One sequence, one base row.
  Cost c;
  for (int64_t r = 1; r <= 8; ++r) c.push_back({r, 1.0});
  c.push_back({16, 5.0});
  DraftScheduler d(DraftSchedule::kStaleGlobal, 5, c);
  const std::vector<DraftScheduler::Candidate> half = {{kHalf, 5}}, sure = {{kSure, 5}};
  // Costs that double at two rows: the early stop admits nothing at 0.9, the global search
  // (no early stop) takes the capacity that pays most: all 5.
  DraftScheduler stair(DraftSchedule::kStaleGlobal, 5, costs({1, 2, 2, 2, 2, 2}));
  const std::vector<DraftScheduler::Candidate> ninety = {{kNinety, 5}};
  EXPECT_EQ(stair.choose(ninety, 1, 1).at(0), 5);  // (1 + 0.9 + ... + 0.59) / 2 = 2.05 > 1
  DraftScheduler prefix(DraftSchedule::kPrefix, 5, costs({1, 2, 2, 2, 2, 2}));
  EXPECT_EQ(prefix.choose(ninety, 1, 1).at(0), 0);
  // Step 1 (no history): sized by its own confidences: all 5 within the flat part.
  EXPECT_EQ(d.choose(half, 1, 1).at(0), 5);
  // Step 2: sized by step 1 (half): 5; live: sure — still 5 (the capacity, not the values).
  EXPECT_EQ(d.choose(sure, 1, 1).at(0), 5);
  // Steps 3, 4 are sized by steps 1, 2: with 7 base rows only one draft fits the flat part;
  // the rest would cost 0.5 a row for at most 0.5 a token.
  EXPECT_EQ(d.choose(half, 1, 7).at(0), 1);
  EXPECT_EQ(d.choose(half, 1, 7).at(0), 1);
}

TEST(DraftScheduler, StaleGlobalFillsItsCapacityWithTheLargestLiveConfidences) {
  // A flat cost: the capacity is every stale draft; the step fills it by live value, each
  // sequence's drafts a prefix.
  DraftScheduler d(DraftSchedule::kStaleGlobal, 5, costs({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  const std::vector<float> low(5, -3.0f);  // sigmoid = 0.047
  const std::vector<DraftScheduler::Candidate> two = {{kHalf, 2}, {kHalf, 2}};
  EXPECT_EQ(d.choose(two, 2, 2), (std::vector<int64_t>{2, 2}));  // capacity 4 (own)
  const std::vector<DraftScheduler::Candidate> one = {{kHalf, 1}};
  EXPECT_EQ(d.choose(one, 1, 1), (std::vector<int64_t>{1}));  // capacity 4 (step 1), 1 live
  // Step 3 is sized by step 1 (4 drafts), step 4 by step 2 (1 draft); live, a likely sequence
  // and an unlikely one: the capacity goes to the likely one's first drafts.
  const std::vector<DraftScheduler::Candidate> mixed = {{low, 5}, {kSure, 5}};
  EXPECT_EQ(d.choose(mixed, 2, 2), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(d.choose(mixed, 2, 2), (std::vector<int64_t>{0, 1}));
}

TEST(DraftScheduler, AConfidenceHeadTheTargetContradictsIsCalibratedAway) {
  // Confidences of 0.5 on a cost of 1 + 0.1 per draft row: at first two drafts are admitted
  // ((1 + .5) / 1.1 = 1.36, (1.5 + .25) / 1.2 = 1.46, then (1.75 + .125) / 1.3 = 1.44 drops).
  // The target accepts none: the calibration drops, the scheduler stops drafting, and
  // explores once every 16 steps with one draft.
  DraftScheduler d(DraftSchedule::kPrefix, 5, costs({1, 1.1, 1.2, 1.3, 1.4, 1.5}));
  EXPECT_EQ(choose_one(d, kHalf, 5), 2);
  for (int i = 0; i < 300; ++i) d.observe(kHalf, 5, 0);
  EXPECT_LT(d.acceptance(1, 0.0f), 0.05);
  int drafted = 0, verified = 0;
  for (int i = 0; i < 64; ++i)
    if (d.should_draft(1, 1, 5)) {
      ++drafted;
      verified += int(choose_one(d, kHalf, 5));
    }
  EXPECT_EQ(drafted, 4);
  EXPECT_EQ(verified, 4);
  // A target that accepts everything brings it back.
  for (int i = 0; i < 600; ++i) d.observe(kHalf, 5, 5);
  EXPECT_GT(d.acceptance(1, 0.0f), 0.9);
  EXPECT_TRUE(d.should_draft(1, 1, 5));
  EXPECT_EQ(choose_one(d, kHalf, 5), 5);
}

TEST(DraftScheduler, DraftingThatCannotRepayItsOwnCostIsSkipped) {
  // Flat passes; drafting one sequence costs as much as a pass, eight cost twice that.
  DraftScheduler free(DraftSchedule::kPrefix, 5, costs({1, 1, 1, 1, 1, 1}));
  DraftScheduler priced(DraftSchedule::kPrefix, 5, costs({1, 1, 1, 1, 1, 1}), {{8, 2.0}, {1, 1.0}});
  EXPECT_DOUBLE_EQ(priced.draft_cost(4), 1.0 + 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(free.draft_cost(4), 0.0);
  // Uncalibrated, a certain head pays: 6 tokens in 2 s > 1 in 1 s.
  EXPECT_TRUE(priced.should_draft(1, 1, 5, 1));
  // A target that accepts almost nothing: free drafting still pays for its first draft
  // (1.01 tokens in 1 s), priced drafting never does (< 1.1 tokens in 2 s) but explores.
  for (int i = 0; i < 300; ++i) {
    free.observe(kHalf, 5, 0);
    priced.observe(kHalf, 5, 0);
  }
  EXPECT_TRUE(free.should_draft(1, 1, 5, 1));
  // Exploring costs a drafting (a pass's time): at most 2% of the steps', once in 50.
  int drafted = 0;
  for (int i = 0; i < 100; ++i) drafted += priced.should_draft(1, 1, 5, 1);
  EXPECT_EQ(drafted, 2);
}

TEST(DraftScheduler, DraftingIsRepaidByTheLastDraftedStepsValuesOrSkipped) {
  // Flat passes; drafting costs half a pass. A step whose drafts were all unlikely (0.047
  // each) predicts the steps after it: drafting would buy under 0.05 tokens for half a pass,
  // so they do not draft, except to explore (once in 25 steps: 2% of the steps' time). For
  // stale-global the step two before sizes the step: two exploring steps with certain drafts
  // later, drafting pays again; for prefix, one.
  const Cost flat = costs({1, 1, 1, 1, 1, 1});
  const std::vector<float> low(5, -3.0f);  // sigmoid = 0.047
  for (DraftSchedule kind : {DraftSchedule::kStaleGlobal, DraftSchedule::kPrefix}) {
    DraftScheduler d(kind, 5, flat, {{1, 0.5}});
    ASSERT_TRUE(d.should_draft(1, 1, 5, 1));  // no history: a certain head would pay
    choose_one(d, low, 5);
    int drafted = 0;
    for (int i = 0; i < 50; ++i)
      if (d.should_draft(1, 1, 5, 1)) {
        ++drafted;
        choose_one(d, kSure, 5);
        if (kind == DraftSchedule::kPrefix) break;
      }
    EXPECT_EQ(drafted, kind == DraftSchedule::kPrefix ? 1 : 2);  // the exploring steps
    EXPECT_TRUE(d.should_draft(1, 1, 5, 1));
  }
}

TEST(DraftScheduler, AFullStepDoesNotDraft) {
  // Passes cost 1 up to 8 rows and 2 from 9: a step of 4 sequences has room for certain
  // drafts, a step of 8 has none (9 tokens in 2 s < 8 in 1 s, and 13 in 2 s too).
  for (DraftSchedule kind : {DraftSchedule::kPrefix, DraftSchedule::kStaleGlobal}) {
    DraftScheduler d(kind, 5, {{8, 1.0}, {9, 2.0}, {16, 2.0}});
    EXPECT_TRUE(d.should_draft(4, 4, 5));
    EXPECT_FALSE(d.should_draft(8, 8, 5));
  }
}

}  // namespace
}  // namespace fathom::engine
