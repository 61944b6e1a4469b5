#include "login_throttle.h"

#include <algorithm>

namespace agentd::detail {

std::chrono::milliseconds LoginThrottle::delay(const std::string& address,
                                               Clock::time_point now) const {
  auto it = failures_.find(address);
  if (it == failures_.end() || now - it->second.last > limits_.window || it->second.count < 2)
    return std::chrono::milliseconds(0);
  // 2 failures: first_delay; each one more doubles it, up to max_delay.
  const std::uint32_t doublings = std::min<std::uint32_t>(it->second.count - 2, 20);
  const auto grown = limits_.first_delay * (std::int64_t{1} << doublings);
  return std::min<std::chrono::milliseconds>(grown, limits_.max_delay);
}

std::uint32_t LoginThrottle::failed(const std::string& address, Clock::time_point now) {
  auto it = failures_.find(address);
  if (it == failures_.end()) {
    if (failures_.size() >= limits_.max_addresses) {
      // Drop what has gone quiet; if nothing has, the stalest address.
      for (auto i = failures_.begin(); i != failures_.end();)
        i = now - i->second.last > limits_.window ? failures_.erase(i) : std::next(i);
      if (failures_.size() >= limits_.max_addresses) {
        auto stalest = std::min_element(failures_.begin(), failures_.end(), [](auto& a, auto& b) {
          return a.second.last < b.second.last;
        });
        failures_.erase(stalest);
      }
    }
    it = failures_.emplace(address, Record{}).first;
  } else if (now - it->second.last > limits_.window) {
    it->second.count = 0;
  }
  it->second.count += 1;
  it->second.last = now;
  return it->second.count;
}

}  // namespace agentd::detail
