// Model config reloads on a real as_server: SIGHUP re-reads --model-config-path (a broken file
// keeps the old configs), setModelConfigs replaces them over RPC (a bad one is refused with
// config_error), and agents see the new configs on their next call.
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace agentd::test;

namespace {

using Names = std::vector<std::string>;

std::string echo_configs(const Names& names) {
  std::string yaml;
  for (const auto& n : names) yaml += "- config_name: " + n + "\n  model_type: echo\n";
  return yaml;
}

}  // namespace

TEST_CASE("SIGHUP reloads --model-config-path, and a broken file keeps the old configs", "[dialog][reload]") {
  TempDir dir;
  const std::string path = dir.write("models.yaml", echo_configs({"alpha"}));
  auto server =
      ServerProcess::start(standard_args({"--plugin", AGENTD_DIALOG_PLUGIN, "--model-config-path", path}));
  Client c = server->connect();

  auto info = c.info();
  CHECK(info.model_configs == Names{"alpha", "echo"});
  const auto v1 = info.model_config_version;
  CHECK(v1 >= 1);
  // An agent on a config the server does not have (yet) is refused at creation.
  CHECK_THROWS_AS(c.create_agent("DialogAgent", "D", Value{{"model_config_name", "beta"}}), Error);

  dir.write("models.yaml", echo_configs({"beta", "gamma"}));
  REQUIRE(::kill(server->pid(), SIGHUP) == 0);
  REQUIRE(wait_until([&] { return c.info().model_configs == Names{"beta", "echo", "gamma"}; }, 20s));
  CHECK(c.info().model_config_version > v1);
  auto agent = c.create_agent("DialogAgent", "D", Value{{"model_config_name", "beta"}});
  CHECK(agent.reply(Msg("user", "now it works", "user")).get().content == "now it works");

  // A broken file: the server says so on stderr and keeps beta and gamma.
  const auto v2 = c.info().model_config_version;
  dir.write("models.yaml", "- config_name: delta\n  model_type: telepathy\n");
  REQUIRE(::kill(server->pid(), SIGHUP) == 0);
  REQUIRE(wait_until(
      [&] { return server->stderr_text().find("kept the previous model configs") != std::string::npos; },
      20s));
  CHECK_THAT(server->stderr_text(), Contains("telepathy"));
  info = c.info();
  CHECK(info.model_configs == Names{"beta", "echo", "gamma"});
  CHECK(info.model_config_version == v2);
  CHECK(agent.reply(Msg("user", "still works", "user")).get().content == "still works");
  CHECK(server->running());
}

TEST_CASE("setModelConfigs replaces the configs, and a bad one is refused with config_error",
          "[dialog][reload]") {
  auto server = ServerProcess::start(standard_args({"--plugin", AGENTD_DIALOG_PLUGIN}));
  Client c = server->connect();
  CHECK(c.info().model_configs == Names{"echo"});
  const auto v0 = c.info().model_config_version;

  const auto v1 = c.set_model_configs(echo_configs({"x"}));
  CHECK(v1 > v0);
  auto info = c.info();
  CHECK(info.model_configs == Names{"echo", "x"});
  CHECK(info.model_config_version == v1);
  auto agent = c.create_agent("DialogAgent", "D", Value{{"model_config_name", "x"}});
  CHECK(agent.reply(Msg("user", "via x", "user")).get().content == "via x");

  // JSON (AgentScope's form) is accepted too.
  const auto v2 = c.set_model_configs(R"([{"config_name": "y", "model_type": "echo"}])");
  CHECK(v2 > v1);
  CHECK(c.info().model_configs == Names{"echo", "y"});
  // x is gone: the agent's next call names what there is.
  try {
    agent.reply(Msg("user", "via x again", "user")).get();
    FAIL("expected config_error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains("'x'") && Contains("known model configs: echo, y"));
  }

  // Bad configs change nothing.
  try {
    c.set_model_configs("- config_name: z\n  model_type: telepathy\n");
    FAIL("expected config_error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains("telepathy") && Contains("openai_chat"));
  }
  try {
    c.set_model_configs("- config_name: [unclosed\n");
    FAIL("expected config_error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
  }
  info = c.info();
  CHECK(info.model_configs == Names{"echo", "y"});
  CHECK(info.model_config_version == v2);
}
