#include "login_throttle.h"

#include <catch2/catch.hpp>

using namespace agentd::detail;
using namespace std::chrono_literals;
using Clock = LoginThrottle::Clock;

TEST_CASE(
    "an address gets its burst of failures, then one per refill period, refused unchecked "
    "in between",
    "[secure][throttle]") {
  LoginThrottle t;
  const auto t0 = Clock::time_point{} + 1h;
  for (int i = 0; i < 10; ++i) {
    CHECK_FALSE(t.refused("10.0.0.1", t0));
    t.failed("10.0.0.1", t0);
  }
  auto r = t.refused("10.0.0.1", t0);
  REQUIRE(r);
  CHECK_FALSE(r->overall);
  CHECK(r->retry_after == 6000ms);
  // Other addresses are not affected.
  CHECK_FALSE(t.refused("10.0.0.2", t0));
  // One more failure is allowed once a token has grown back.
  CHECK(t.refused("10.0.0.1", t0 + 5s));
  CHECK(t.refused("10.0.0.1", t0 + 5s)->retry_after == 1000ms);
  CHECK_FALSE(t.refused("10.0.0.1", t0 + 6s));
  t.failed("10.0.0.1", t0 + 6s);
  CHECK(t.refused("10.0.0.1", t0 + 6s));
  // A full bucket is forgotten.
  CHECK_FALSE(t.refused("10.0.0.1", t0 + 2min));
  CHECK(t.addresses() == 0);
}

TEST_CASE(
    "the server's bucket limits failures from many addresses, but never addresses without "
    "failures",
    "[secure][throttle]") {
  LoginThrottle::Limits limits;
  limits.overall_burst = 20;
  LoginThrottle t(limits);
  const auto t0 = Clock::time_point{} + 1h;
  // 10 addresses fail twice each: the server's 20 are spent.
  for (int i = 0; i < 10; ++i)
    for (int k = 0; k < 2; ++k) {
      CHECK_FALSE(t.refused("a" + std::to_string(i), t0));
      t.failed("a" + std::to_string(i), t0);
    }
  auto r = t.refused("a0", t0);
  REQUIRE(r);
  CHECK(r->overall);
  CHECK(r->retry_after == 200ms);
  CHECK_FALSE(t.refused("never-failed", t0));
  CHECK_FALSE(t.refused("a0", t0 + 200ms));
}

TEST_CASE("the throttle remembers a bounded number of addresses", "[secure][throttle]") {
  LoginThrottle::Limits limits;
  limits.max_addresses = 3;
  LoginThrottle t(limits);
  const auto t0 = Clock::time_point{} + 1h;
  for (int i = 0; i < 10; ++i)
    for (int k = 0; k < 10; ++k) t.failed("x" + std::to_string(i), t0);
  CHECK(t.addresses() == 3);
  CHECK(t.refused("x9", t0));
}
