#include "engine/scheduler.h"

#include <algorithm>

namespace fathom::engine {

Scheduler::Scheduler(const ModelRunner& runner, kv::PagePool* pool, SchedulerOptions options,
                     const KvReservations* holds, PrefixView prefix)
    : runner_(runner),
      pool_(pool),
      opt_(options),
      holds_(holds),
      prefix_(std::move(prefix)),
      free_pages_(pool->max_pages()) {}

bool Scheduler::wait_for_shared_blocks(
    const Sequence& s, const std::vector<Report>& now, const std::vector<const Sequence*>& fresh,
    const std::vector<std::shared_ptr<Sequence>>& admitted) const {
  if (!prefix_.cached_chain || !prefix_.resumable_blocks || !opt_.chunk_at_blocks) return false;
  // Only blocks s may resume from are worth waiting for.
  const int64_t reach =
      std::min<int64_t>(prefix_.resumable_blocks(s), int64_t(s.block_hashes.size()));
  if (reach <= 0) return false;
  const std::span<const uint64_t> mine = std::span(s.block_hashes).first(size_t(reach));
  const int64_t have = prefix_.cached_chain(mine);
  // The leading blocks `other` shares with s (within its reach).
  auto shared = [&](const Sequence& other) {
    const std::vector<uint64_t>& theirs = other.block_hashes;
    const size_t n = std::min(mine.size(), theirs.size());
    int64_t k = 0;
    while (size_t(k) < n && mine[size_t(k)] == theirs[size_t(k)]) ++k;
    return k;
  };
  const int64_t B = opt_.prefix_block;
  for (const Report& r : now) {
    // A prefill that has not yet run past the blocks it shares with s beyond the cached chain.
    // One the plan in flight admitted runs from its own cached chain to the next block at most
    // (its chunks end at blocks), whatever the plan asked.
    const int64_t prompt = int64_t(r.s->req.prompt.size());
    int64_t prefilled = r.prefilled;
    if (std::find(fresh.begin(), fresh.end(), r.s.get()) != fresh.end())
      prefilled = std::min(prefilled, (prefix_.cached_chain(r.s->block_hashes) + 1) * B);
    if (prefilled >= prompt) continue;
    const int64_t k = shared(*r.s);
    if (k > have && prefilled < k * B) return true;
  }
  // Admitted beside it: they compute (from their own cached chain) what s would compute too.
  for (const auto& a : admitted)
    if (shared(*a) > have) return true;
  return false;
}

int64_t Scheduler::chunk_size(const Sequence& s, int64_t prefilled, int64_t left,
                              int64_t want) const {
  int64_t n = std::min(left, want);
  if (left <= 1) return n;
  const int64_t prompt = int64_t(s.req.prompt.size());
  if (prefilled >= prompt) return std::min<int64_t>(n, 1);  // recomputing generated tokens
  n = std::min(n, prompt - prefilled);
  if (opt_.chunk_at_blocks) {
    const int64_t next_block = (prefilled / opt_.prefix_block + 1) * opt_.prefix_block;
    if (next_block <= prompt) n = std::min(n, next_block - prefilled);
  }
  return n;
}

std::vector<std::shared_ptr<Sequence>> Scheduler::take_cancelled() {
  std::vector<std::shared_ptr<Sequence>> gone;
  for (auto it = waiting_.begin(); it != waiting_.end();)
    if ((*it)->stream->cancelled()) {
      gone.push_back(*it);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  return gone;
}

std::deque<std::shared_ptr<Sequence>> Scheduler::take_waiting() {
  std::deque<std::shared_ptr<Sequence>> out;
  out.swap(waiting_);
  return out;
}

Plan Scheduler::plan(const Plan* in_flight) {
  // What each running sequence has left once the step in flight has run: a chunk of N over
  // L tokens left leaves L - N, or 1 (the sampled token) when it completes the prompt.
  auto chunk = [&](const Report& r, int64_t n) { return chunk_size(*r.s, r.prefilled, r.left, n); };
  std::vector<Report> now = view_;
  std::vector<const Sequence*> just_admitted;  // by the plan in flight: progress unknown
  if (in_flight) {
    for (const auto& [s, want] : in_flight->work) {
      auto it = std::find_if(now.begin(), now.end(), [&](const Report& r) { return r.s == s; });
      if (it != now.end()) {
        const int64_t n = chunk(*it, want);
        if (it->left > 1) it->left = n >= it->left ? 1 : it->left - n;
        it->prefilled += n;
        continue;
      }
      // A sequence the plan in flight admits: not in the report yet (its resume point is the
      // executor's to find; assume none).
      if (std::find(in_flight->admit.begin(), in_flight->admit.end(), s) !=
          in_flight->admit.end()) {
        now.push_back({s, std::max<int64_t>(1, s->resume_hint_at_plan - want), want});
        just_admitted.push_back(s.get());
      }
    }
  }
  Plan p;
  int64_t budget = opt_.max_step_tokens;
  for (const Report& r : now)
    if (r.left == 1) {
      p.work.emplace_back(r.s, 1);
      --budget;
    }
  for (const Report& r : now) {
    if (r.left <= 1 || budget <= 0) continue;
    const int64_t n = chunk(r, budget);
    p.work.emplace_back(r.s, n);
    budget -= n;
  }
  // Admissions in queue order, while the pool looks like it has room (the executor decides for
  // good). One waiting for blocks another computes is passed over and keeps its place: its slot
  // and pages are set aside, so the requests behind it take only what is left.
  int64_t running = int64_t(now.size()), room = free_pages_;
  for (auto it = waiting_.begin();
       it != waiting_.end() && running < opt_.max_running && budget > 0;) {
    const std::shared_ptr<Sequence> s = *it;
    const int64_t left = std::max<int64_t>(1, s->resume_hint);
    auto fresh = runner_.new_sequence(pool_);
    const int64_t need = runner_.pages_needed(*fresh, std::min(left, budget));
    // Pages held for other P/D hand-offs; one held for this request means its blocks come
    // with it (it never waits for another's).
    int64_t held = 0;
    bool own_hold = false;
    if (holds_ != nullptr && !holds_->empty()) {
      held = holds_->held_except(KvReservations::key_of(s->req.prompt, s->req.cache_salt));
      own_hold = holds_->held() > held;
    }
    if (running > 0 && need + held > room) break;
    room -= need;
    ++running;
    if (!own_hold && wait_for_shared_blocks(*s, now, just_admitted, p.admit)) {
      ++it;
      continue;
    }
    const int64_t n = std::min(left, budget);
    s->resume_hint_at_plan = left;
    p.admit.push_back(s);
    p.work.emplace_back(s, n);
    budget -= n;
    it = waiting_.erase(it);
  }
  return p;
}

void Scheduler::apply(Outcome& out) {
  view_ = std::move(out.running);
  // Back to the queue's front, in their order: preempted first (they were running).
  for (auto it = out.deferred.rbegin(); it != out.deferred.rend(); ++it) waiting_.push_front(*it);
  for (auto it = out.preempted.rbegin(); it != out.preempted.rend(); ++it) waiting_.push_front(*it);
  free_pages_ = out.free_pages;
}

}  // namespace fathom::engine
