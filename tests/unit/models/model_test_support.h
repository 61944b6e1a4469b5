// Helpers the model client tests share: a model from one YAML config, a conversation, the Error a
// call throws.
#pragma once

#include "chat_models.h"
#include "model_registry.h"
#include "model_config.h"
#include "test_names.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

namespace agentd::test {

inline std::shared_ptr<ChatModel> model_from_yaml(const std::string& yaml) {
  auto configs = agentd::detail::parse_model_configs(yaml, "test.yaml");
  REQUIRE(configs.size() == 1);
  return agentd::detail::make_chat_model(configs[0]);
}

inline std::vector<Msg> conversation(const std::string& last = "hello there model") {
  return {Msg("system", Value("You are a test."), "system"), Msg("user", Value(last), "user")};
}

// The agentd::Error `call` throws (fails the test if it throws nothing or something else).
template <typename F>
Error error_from(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an agentd::Error");
  throw;  // unreachable
}

// client_args that keep the tests fast: short timeout, two retries, small delays.
inline const char* kFastClientArgs = "{timeout: 5, max_retries: 2, retry_initial_delay: 0.02}";

}  // namespace agentd::test
