// agentd::Error: stable code names, retryability, and what() naming code, agent, class, cause.
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <set>
#include <string>

using namespace agentd::test;

namespace {
constexpr ErrorCode kAll[] = {
    ErrorCode::internal,          ErrorCode::unknown_agent,   ErrorCode::unknown_class,
    ErrorCode::bad_args,          ErrorCode::agent_failed,    ErrorCode::expired,
    ErrorCode::duplicate_call_id, ErrorCode::unknown_method,  ErrorCode::disconnected,
    ErrorCode::timeout,           ErrorCode::overloaded,      ErrorCode::bad_request,
    ErrorCode::model_error,       ErrorCode::unauthenticated, ErrorCode::duplicate_agent,
    ErrorCode::stopping,          ErrorCode::unknown_call,    ErrorCode::config_error,
    ErrorCode::plugin_error,      ErrorCode::too_large,
};
}  // namespace

TEST_CASE("every error code has a distinct name that maps back to it", "[error]") {
  std::set<std::string> names;
  for (auto code : kAll) {
    std::string name(agentd::to_string(code));
    CHECK_FALSE(name.empty());
    names.insert(name);
    CHECK(agentd::error_code_from_string(name) == code);
  }
  CHECK(names.size() == std::size(kAll));
  CHECK(agentd::to_string(ErrorCode::unknown_agent) == "unknown_agent");
  CHECK(agentd::to_string(ErrorCode::agent_failed) == "agent_failed");
  CHECK(agentd::to_string(ErrorCode::expired) == "expired");
  CHECK(agentd::error_code_from_string("no_such_code") == ErrorCode::internal);
}

TEST_CASE("only transient failures are retryable by default", "[error]") {
  for (auto code : kAll) {
    bool expect = code == ErrorCode::disconnected || code == ErrorCode::timeout ||
                  code == ErrorCode::overloaded || code == ErrorCode::stopping;
    CHECK(agentd::is_retryable(code) == expect);
    CHECK(Error(code, "m").retryable() == expect);
  }
  CHECK(Error(ErrorCode::unknown_call, "m", "", "", true).retryable());
  CHECK_FALSE(Error(ErrorCode::disconnected, "m", "", "", false).retryable());
}

TEST_CASE("an Error names its code, agent, class and cause", "[error]") {
  Error e(ErrorCode::agent_failed, "reply raised: boom", "a1", "FlakyAgent");
  CHECK(e.code() == ErrorCode::agent_failed);
  CHECK(e.agent_id() == "a1");
  CHECK(e.agent_class() == "FlakyAgent");
  CHECK(e.message() == "reply raised: boom");
  CHECK_THAT(std::string(e.what()),
             Contains("agent_failed") && Contains("a1") && Contains("FlakyAgent") && Contains("boom"));
  const std::runtime_error& base = e;
  CHECK_THAT(std::string(base.what()), Contains("boom"));
  Error plain(ErrorCode::timeout, "slow");
  CHECK(plain.agent_id().empty());
  CHECK_THAT(std::string(plain.what()), Contains("timeout") && Contains("slow"));
}
