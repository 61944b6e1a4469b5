// ServerServices::model(): every call is counted for the agent that made it and for its config.
#include "server_services.h"
#include "model_registry.h"
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

using namespace agentd::test;
using agentd::detail::ModelRegistry;
using agentd::detail::ServerServices;

TEST_CASE("model usage is recorded per agent and per config", "[dialog][usage]") {
  ModelRegistry models;
  ServerServices services{models};

  // echo counts words: 3 prompt tokens, and it answers with the same 3 words.
  auto r1 = services.model("echo", "agent-1")->chat({Msg("user", "one two three", "user")});
  CHECK(r1.msg.content == "one two three");
  services.model("echo", "agent-1")->chat({Msg("user", "four", "user")});
  services.model("echo", "agent-2")->chat({Msg("user", "five six", "user")});

  auto a1 = services.agent_usage("agent-1");
  CHECK(a1.calls == 2);
  CHECK(a1.errors == 0);
  CHECK(a1.prompt_tokens == 4);
  CHECK(a1.completion_tokens == 4);
  auto a2 = services.agent_usage("agent-2");
  CHECK(a2.calls == 1);
  CHECK(a2.prompt_tokens == 2);
  CHECK(services.agent_usage("nobody").calls == 0);

  // The registry's per-config counters see all of them once.
  auto total = models.total_usage();
  CHECK(total.calls == 3);
  CHECK(total.prompt_tokens == 6);

  // A deleted agent's counter goes; a new agent under the same id starts from zero.
  services.forget_agent("agent-1");
  CHECK(services.agent_usage("agent-1").calls == 0);
  CHECK(services.agent_usage("agent-2").calls == 1);
}

TEST_CASE("an unknown config names the known ones and records nothing", "[dialog][usage]") {
  ModelRegistry models;
  ServerServices services{models};
  try {
    services.model("nope", "agent-1");
    FAIL("expected config_error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains("nope") && Contains("known model configs: echo"));
  }
  CHECK(services.agent_usage("agent-1").calls == 0);
}
