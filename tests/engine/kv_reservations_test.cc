// KV held for P/D hand-offs (engine/kv_reservations.h): holds are refused past the free pages,
// claimed by the request they are for, released, and end at their deadline; the scheduler
// plans no other admission into held pages (the held request's own hold is room for it); on
// the tiny checkpoint the engine holds a hand-off's pages, refuses a second hold while the
// first stands, gives the request its exact answer, and leaves no page behind.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_reservations.h"
#include "engine/scheduler.h"
#include "engine/test_util.h"
#include "model/v41.h"

namespace fathom::engine {
namespace {

using test::tiny_model;
using test::tiny_runner;

using Clock = KvReservations::Clock;

std::vector<int32_t> prompt(int n, int salt) {
  std::vector<int32_t> p = {0};
  for (int i = 1; i < n; ++i) p.push_back(int32_t((i * 37 + salt * 101) % 990 + 3));
  return p;
}

TEST(KvReservations, HoldsAreBoundedClaimedReleasedAndExpire) {
  KvReservations r;
  const auto later = Clock::now() + std::chrono::hours(1);
  const uint64_t a = KvReservations::key_of(prompt(40, 1), 0);
  const uint64_t b = KvReservations::key_of(prompt(40, 2), 0);
  EXPECT_NE(a, KvReservations::key_of(prompt(40, 1), 7));  // the tenant salt is part of it
  EXPECT_TRUE(r.empty());
  auto ha = r.hold(a, 60, 100, later);
  ASSERT_TRUE(ha.is_ok());
  auto hb = r.hold(b, 41, 100, later);  // 60 + 41 > 100
  ASSERT_FALSE(hb.is_ok());
  EXPECT_EQ(hb.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(hb.status().message().find("needs 41 pages, 40 are free"), std::string::npos)
      << hb.status().message();
  ASSERT_TRUE(r.hold(b, 40, 100, later).is_ok());
  EXPECT_EQ(r.held(), 100);
  EXPECT_EQ(r.held_except(a), 40);
  EXPECT_EQ(r.held_except(b), 60);
  EXPECT_EQ(r.held_except(12345), 100);
  // The admission of a's request takes its hold; a second claim finds none.
  EXPECT_EQ(r.claim(a), 60);
  EXPECT_EQ(r.claim(a), 0);
  EXPECT_EQ(r.held(), 40);
  // Released by its holder (twice is harmless), and expired at its deadline.
  r.release(*ha);  // already claimed: nothing
  EXPECT_EQ(r.held(), 40);
  auto soon = r.hold(a, 30, 100, Clock::now() + std::chrono::milliseconds(50));
  ASSERT_TRUE(soon.is_ok());
  EXPECT_EQ(r.held(), 70);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(r.held(), 40);
  EXPECT_EQ(r.claim(a), 0);
  auto hb2 = r.hold(b, 10, 100, later);
  ASSERT_TRUE(hb2.is_ok());
  r.release(*hb2);
  r.release(*hb2);
  EXPECT_EQ(r.held(), 40);
  EXPECT_EQ(r.claim(b), 40);
  EXPECT_TRUE(r.empty());
}

// A queued request, as submit() makes it for the scheduler.
std::shared_ptr<Sequence> queued(std::vector<int32_t> p) {
  auto s = std::make_shared<Sequence>();
  s->req.prompt = std::move(p);
  s->req.max_tokens = 8;
  s->stream = std::make_shared<RequestStream>();
  s->all = s->req.prompt;
  s->resume_hint = int64_t(s->all.size());
  return s;
}

TEST(KvReservations, TheSchedulerPlansNoOtherAdmissionIntoHeldPages) {
  const auto& m = tiny_model();
  kv::PagePool pool(m.page_bytes(16), 0);
  const auto later = Clock::now() + std::chrono::hours(1);
  const std::vector<int32_t> held_prompt = prompt(48, 3), other = prompt(48, 4);
  const int64_t need = tiny_runner().pages_needed(*tiny_runner().new_sequence(&pool), 48);
  // A running sequence, and room for exactly one more admission of `need` pages.
  auto plan_with = [&](const KvReservations* holds, const std::vector<int32_t>& p) {
    Scheduler sched(tiny_runner(), &pool, SchedulerOptions{}, holds);
    Outcome out;
    out.running.push_back({queued(prompt(20, 9)), 1, 20});
    out.free_pages = need + 5;
    sched.apply(out);
    sched.enqueue(queued(p));
    return sched.plan(nullptr).admit.size();
  };
  KvReservations none, holds;
  ASSERT_TRUE(holds.hold(KvReservations::key_of(held_prompt, 0), 6, 1000, later).is_ok());
  EXPECT_EQ(plan_with(nullptr, other), 1u);
  EXPECT_EQ(plan_with(&none, other), 1u);
  // 6 pages held for another request: `other` no longer fits beside them...
  EXPECT_EQ(plan_with(&holds, other), 0u);
  // ... while the request they are held for does.
  EXPECT_EQ(plan_with(&holds, held_prompt), 1u);
}

std::vector<int32_t> drain(RequestStream& s, StreamEvent* last) {
  std::vector<int32_t> out;
  StreamEvent ev;
  while (s.next(&ev, 60000)) {
    out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finished) {
      *last = ev;
      break;
    }
  }
  return out;
}

GenerationRequest greedy(std::vector<int32_t> p, int n) {
  GenerationRequest r;
  r.prompt = std::move(p);
  r.sampling.temperature = 0;
  r.max_tokens = n;
  return r;
}

// Waits until the step that ended the last request is over (its pages are back in the pool
// only then, after its final event was sent).
void wait_idle(const Engine& e) {
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (e.stats().running > 0 && Clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(e.stats().running, 0);
}

TEST(KvReservations, TheEngineHoldsAHandOffsPagesUntilItsRequestIsAdmitted) {
  const auto& m = tiny_model();
  kv::PagePool probe_pool(m.page_bytes(8), 0);
  auto probe = m.new_sequence(&probe_pool);
  const int64_t pages = m.pages_needed(*probe, 48 + 24);
  EngineOptions o;
  o.prefix_block = 16;
  o.kv_budget_bytes = (pages + pages / 2) * m.page_bytes(8);  // one hand-off, not two
  const auto later = Clock::now() + std::chrono::hours(1);
  const std::vector<int32_t> pa = prompt(48, 21), pb = prompt(48, 22);
  // The answers without any hold: the truth the held requests must give.
  std::vector<int32_t> want_a, want_b;
  {
    Engine plain(tiny_runner(), o, -1);
    StreamEvent last;
    want_a = drain(**plain.submit(greedy(pa, 24)), &last);
    want_b = drain(**plain.submit(greedy(pb, 24)), &last);
    ASSERT_EQ(want_a.size(), 24u);
  }
  Engine e(tiny_runner(), o, -1);
  auto ha = e.reserve_kv(pa, 0, 24, later);
  ASSERT_TRUE(ha.is_ok()) << ha.status().message();
  EXPECT_EQ(e.reserved_kv_pages(), pages);
  auto hb = e.reserve_kv(pb, 0, 24, later);
  ASSERT_FALSE(hb.is_ok());
  EXPECT_EQ(hb.status().code(), StatusCode::kResourceExhausted);
  // A's request takes its hold at admission and gives the exact answer.
  StreamEvent last;
  EXPECT_EQ(drain(**e.submit(greedy(pa, 24)), &last), want_a);
  EXPECT_EQ(last.cause, FinishCause::kLength);
  EXPECT_EQ(e.reserved_kv_pages(), 0);
  wait_idle(e);
  // Now B's hold fits; released unused, it leaves room for another.
  auto hb2 = e.reserve_kv(pb, 0, 24, later);
  ASSERT_TRUE(hb2.is_ok()) << hb2.status().message();
  e.release_kv(*hb2);
  EXPECT_EQ(e.reserved_kv_pages(), 0);
  ASSERT_TRUE(e.reserve_kv(pb, 0, 24, later).is_ok());
  EXPECT_EQ(drain(**e.submit(greedy(pb, 24)), &last), want_b);
  EXPECT_EQ(e.reserved_kv_pages(), 0);
  wait_idle(e);
  // A hold never claimed ends at its deadline.
  ASSERT_TRUE(e.reserve_kv(pa, 0, 24, Clock::now() + std::chrono::milliseconds(100)).is_ok());
  EXPECT_EQ(e.reserved_kv_pages(), pages);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(e.reserved_kv_pages(), 0);
  // No page left behind: what is in use belongs to the prefix cache's blocks.
  const EngineStats st = e.stats();
  EXPECT_EQ(st.kv_pages_used * st.kv_page_bytes, st.prefix_cache_bytes);
  // Refused input.
  EXPECT_EQ(e.reserve_kv({}, 0, 24, later).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fathom::engine
