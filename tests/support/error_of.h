// error_of(f): runs f, which must throw agentd::Error, and returns that error (the test fails
// when f returns normally).
#pragma once

#include <agentd/error.h>

#include <catch2/catch.hpp>

namespace agentd::test {

template <typename F>
agentd::Error error_of(F&& f) {
  try {
    f();
  } catch (const agentd::Error& e) {
    return e;
  }
  FAIL("expected an agentd::Error");
  return agentd::Error(agentd::ErrorCode::internal, "unreachable");
}

}  // namespace agentd::test
