// LoginThrottle: slows down logins from an address that recently failed to log in. Every login
// from such an address (right or wrong, however many at once) is answered only after a delay
// that doubles with each recent failure: none after the first, then 100 ms, 200 ms, ... up to
// 5 s. Failures are forgotten after a quiet window (10 min) and after a successful login.
// Bounded: it remembers at most max_addresses addresses (the stalest are dropped first).
// Loop thread only (no locking); the clock is passed in so tests can drive it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace agentd::detail {

class LoginThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    std::chrono::milliseconds first_delay{100};   // after the second failure
    std::chrono::milliseconds max_delay{5000};
    std::chrono::milliseconds window{10 * 60 * 1000};  // failures older than this are forgotten
    std::size_t max_addresses = 4096;
  };

  LoginThrottle() = default;
  explicit LoginThrottle(Limits limits) : limits_(limits) {}

  // How long to hold a login from address before checking it.
  std::chrono::milliseconds delay(const std::string& address, Clock::time_point now) const;
  // Records a failed login; returns the address's recent failures, this one included.
  std::uint32_t failed(const std::string& address, Clock::time_point now);
  // A successful login forgives the address.
  void succeeded(const std::string& address) { failures_.erase(address); }

  std::size_t addresses() const { return failures_.size(); }

 private:
  struct Record {
    std::uint32_t count = 0;
    Clock::time_point last;
  };
  Limits limits_;
  std::map<std::string, Record> failures_;
};

}  // namespace agentd::detail
