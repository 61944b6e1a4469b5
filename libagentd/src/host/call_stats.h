// Call statistics the agent host keeps per server: the run-time histogram of finished calls.
#pragma once

#include <array>
#include <cstdint>

namespace agentd::detail {

// Run times of finished calls. Not thread-safe: the agent host records under its lock.
struct LatencyHistogram {
  static constexpr std::array<double, 11> kBounds = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05,
                                                      0.1,    0.5,    1,     5,     10};
  std::array<std::uint64_t, kBounds.size()> buckets{};  // per bucket, not cumulative
  std::uint64_t count = 0;                              // every observation (the +Inf bucket)
  double sum = 0;                                       // seconds

  void observe(double seconds);
};

}  // namespace agentd::detail
