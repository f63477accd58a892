// LatencyHistogram: how long a KV store tier's reads and writes took, in the fixed buckets
// `/metrics` publishes as a Prometheus histogram (fathom_kv_store_{read,write}_seconds). Plain
// data: the owner guards it (a tier's stats lock, the write queue's lock).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace fathom::kv {

struct LatencyHistogram {
  // Upper bounds in seconds (a value equal to a bound counts in that bucket); past the last,
  // the +Inf bucket.
  static constexpr std::array<double, 12> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                     0.01,   0.025,   0.05,   0.1,   0.5,    2.5};
  std::array<int64_t, kBounds.size() + 1> counts{};  // per bucket, not cumulative
  int64_t count = 0;
  double sum = 0;  // seconds

  void observe(double seconds) {
    size_t b = 0;
    while (b < kBounds.size() && seconds > kBounds[b]) ++b;
    ++counts[b];
    ++count;
    sum += seconds;
  }
  void merge(const LatencyHistogram& o) {
    for (size_t b = 0; b < counts.size(); ++b) counts[b] += o.counts[b];
    count += o.count;
    sum += o.sum;
  }
};

// Seconds since `start` on the steady clock (latencies never use a store's retention clock,
// which tests move by hand).
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace fathom::kv
