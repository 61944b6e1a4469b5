#include "login_throttle.h"

#include <algorithm>
#include <cmath>

namespace agentd::detail {

void LoginThrottle::refill(Bucket& b, double burst, std::chrono::milliseconds every, Clock::time_point now) {
  if (now > b.updated) {
    const double grown = std::chrono::duration<double, std::milli>(now - b.updated).count() /
                         static_cast<double>(every.count());
    b.tokens = std::min(burst, b.tokens + grown);
  }
  b.updated = std::max(b.updated, now);
}

std::chrono::milliseconds LoginThrottle::until_one(const Bucket& b, std::chrono::milliseconds every) {
  const double missing = std::max(0.0, 1.0 - b.tokens);
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(std::ceil(missing * static_cast<double>(every.count()))));
}

std::optional<LoginThrottle::Refusal> LoginThrottle::refused(const std::string& address,
                                                             Clock::time_point now) {
  refill(overall_, limits_.overall_burst, limits_.overall_refill, now);
  auto it = buckets_.find(address);
  if (it == buckets_.end()) return std::nullopt;  // no recent failure: always checked
  Bucket& b = it->second;
  refill(b, limits_.per_address_burst, limits_.per_address_refill, now);
  if (b.tokens < 1) return Refusal{false, until_one(b, limits_.per_address_refill)};
  if (b.tokens >= limits_.per_address_burst) {
    buckets_.erase(it);  // full again: nothing to remember
    return std::nullopt;
  }
  if (overall_.tokens < 1) return Refusal{true, until_one(overall_, limits_.overall_refill)};
  return std::nullopt;
}

void LoginThrottle::failed(const std::string& address, Clock::time_point now) {
  refill(overall_, limits_.overall_burst, limits_.overall_refill, now);
  overall_.tokens = std::max(0.0, overall_.tokens - 1);
  auto it = buckets_.find(address);
  if (it == buckets_.end()) {
    if (buckets_.size() >= limits_.max_addresses) forget_some(now);
    it = buckets_.emplace(address, Bucket{limits_.per_address_burst, now}).first;
  }
  Bucket& b = it->second;
  refill(b, limits_.per_address_burst, limits_.per_address_refill, now);
  b.tokens = std::max(0.0, b.tokens - 1);
}

void LoginThrottle::forget_some(Clock::time_point now) {
  // Buckets grown full again first; if none, the fullest one.
  for (auto i = buckets_.begin(); i != buckets_.end();) {
    refill(i->second, limits_.per_address_burst, limits_.per_address_refill, now);
    i = i->second.tokens >= limits_.per_address_burst ? buckets_.erase(i) : std::next(i);
  }
  if (buckets_.size() < limits_.max_addresses) return;
  auto fullest = std::max_element(buckets_.begin(), buckets_.end(),
                                  [](auto& a, auto& b) { return a.second.tokens < b.second.tokens; });
  buckets_.erase(fullest);
}

}  // namespace agentd::detail
