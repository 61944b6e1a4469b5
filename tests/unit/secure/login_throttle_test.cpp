#include "login_throttle.h"

#include <catch2/catch.hpp>

using namespace agentd::detail;
using namespace std::chrono_literals;
using Clock = LoginThrottle::Clock;

TEST_CASE("logins from an address that keeps failing wait longer and longer, up to the cap",
          "[secure][throttle]") {
  LoginThrottle t;
  const auto t0 = Clock::time_point{} + 1h;
  CHECK(t.delay("10.0.0.1", t0) == 0ms);
  CHECK(t.failed("10.0.0.1", t0) == 1);
  CHECK(t.delay("10.0.0.1", t0) == 0ms);  // one slip costs nothing
  t.failed("10.0.0.1", t0);
  CHECK(t.delay("10.0.0.1", t0) == 100ms);
  t.failed("10.0.0.1", t0);
  CHECK(t.delay("10.0.0.1", t0) == 200ms);
  t.failed("10.0.0.1", t0);
  CHECK(t.delay("10.0.0.1", t0) == 400ms);
  for (int i = 0; i < 40; ++i) t.failed("10.0.0.1", t0);
  CHECK(t.delay("10.0.0.1", t0) == 5000ms);
  // Other addresses are not affected.
  CHECK(t.delay("10.0.0.2", t0) == 0ms);
}

TEST_CASE("failures are forgotten after a success or a quiet window", "[secure][throttle]") {
  LoginThrottle t;
  const auto t0 = Clock::time_point{} + 1h;
  for (int i = 0; i < 5; ++i) t.failed("a", t0);
  CHECK(t.delay("a", t0) > 0ms);
  t.succeeded("a");
  CHECK(t.delay("a", t0) == 0ms);
  for (int i = 0; i < 5; ++i) t.failed("a", t0);
  CHECK(t.delay("a", t0 + 11min) == 0ms);
  CHECK(t.failed("a", t0 + 11min) == 1);  // counting starts over
}

TEST_CASE("the throttle remembers a bounded number of addresses", "[secure][throttle]") {
  LoginThrottle::Limits limits;
  limits.max_addresses = 3;
  LoginThrottle t(limits);
  const auto t0 = Clock::time_point{} + 1h;
  for (int i = 0; i < 10; ++i) {
    t.failed("x" + std::to_string(i), t0 + std::chrono::seconds(i));
    t.failed("x" + std::to_string(i), t0 + std::chrono::seconds(i));
  }
  CHECK(t.addresses() == 3);
  // The newest are kept.
  CHECK(t.delay("x9", t0 + 10s) == 100ms);
  CHECK(t.delay("x0", t0 + 10s) == 0ms);
}
