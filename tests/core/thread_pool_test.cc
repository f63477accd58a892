#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace fathom {
namespace {

TEST(ThreadPool, RunsEveryIndexOnce) {
  for (size_t threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (size_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t i) { hits[i]++; });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1);
    }
  }
}

TEST(ThreadPool, UsesMoreThanOneThread) {
  // Each task waits (bounded) for a second thread to be inside a task at the same time, so
  // the check does not depend on scheduling luck on a loaded machine.
  ThreadPool pool(2);
  std::atomic<int> inside{0}, max_inside{0};
  pool.parallel_for(8, [&](size_t) {
    int now = ++inside;
    int m = max_inside.load();
    while (now > m && !max_inside.compare_exchange_weak(m, now)) {
    }
    for (int i = 0; i < 5000 && max_inside.load() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    --inside;
  });
  EXPECT_EQ(max_inside.load(), 2);
}

TEST(ThreadPool, ConcurrentCallersShareWorkers) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) pool.parallel_for(100, [&](size_t i) { sum += long(i); });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4L * 50 * 4950);
}

}  // namespace
}  // namespace fathom
