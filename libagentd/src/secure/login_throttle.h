// LoginThrottle: limits the rate of failed logins with token buckets, one per source address and
// one for the whole server (README "Security" documents the numbers). Every failed login takes
// one token from its address's bucket and one from the server's; buckets refill steadily up to
// their size; successful logins cost nothing.
// - An address whose bucket is empty has its logins refused at once, without their tokens being
//   checked, until a token has grown back (refused() says how long that takes).
// - While the server's bucket is empty, logins from addresses with recent failures (a bucket not
//   full) are refused the same way; an address with none is always checked, so a crowd of
//   guessers cannot lock out clients that never failed.
// Nothing ever waits: a refusal is an answer at once, and other addresses are not slowed.
// Bounded: at most max_addresses addresses are remembered (the fullest buckets, the ones that
// matter least, are forgotten first). Loop thread only (no locking); the clock is passed in so
// tests can drive it.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

namespace agentd::detail {

class LoginThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    double per_address_burst = 10;                       // failures one address may make at once
    std::chrono::milliseconds per_address_refill{6000};  // then one more every 6 s (10 a minute)
    double overall_burst = 100;                          // failures all addresses may make at once
    std::chrono::milliseconds overall_refill{200};       // then one more every 200 ms (5 a second)
    std::size_t max_addresses = 4096;
  };
  // Why a login is refused unchecked, and when trying again can succeed.
  struct Refusal {
    bool overall = false;  // the server's bucket is empty (else the address's)
    std::chrono::milliseconds retry_after{0};
  };

  LoginThrottle() = default;
  explicit LoginThrottle(Limits limits) : limits_(limits) {}
  const Limits& limits() const { return limits_; }

  // Whether a login from address may be checked now; a Refusal when it must be refused unchecked.
  std::optional<Refusal> refused(const std::string& address, Clock::time_point now);
  // Records a failed login from address (takes a token from its bucket and the server's).
  void failed(const std::string& address, Clock::time_point now);

  std::size_t addresses() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point updated;
  };
  static void refill(Bucket& b, double burst, std::chrono::milliseconds every, Clock::time_point now);
  static std::chrono::milliseconds until_one(const Bucket& b, std::chrono::milliseconds every);
  void forget_some(Clock::time_point now);

  Limits limits_;
  Bucket overall_{limits_.overall_burst, Clock::time_point{}};
  std::map<std::string, Bucket> buckets_;  // addresses with recent failures
};

}  // namespace agentd::detail
