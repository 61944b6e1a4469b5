#include "call_stats.h"

namespace agentd::detail {

void LatencyHistogram::observe(double seconds) {
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      ++buckets[i];
      break;
    }
  }
  ++count;
  sum += seconds;
}

}  // namespace agentd::detail
