// agentctl and --state-dir: `status` shows the state dir, its size and the last commit (or that
// agents live in memory only); `clone` copies an agent.
#include "agentctl_runner.h"
#include "server_process.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

using namespace agentd::test;
using agentd::Value;
using Catch::Matchers::Contains;

TEST_CASE("agentctl status shows the state dir, its size and the last commit", "[agentctl][state]") {
  TempDir dir;
  auto server = ServerProcess::start(standard_args({"--state-dir", dir.path() + "/state"}));
  server->connect().create_agent("EchoAgent").reply(agentd::Msg("user", Value("x"))).get();
  const std::string port = std::to_string(server->port());
  auto text = run_agentctl({"--port", port, "status"});
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Contains("state") && Contains(dir.path() + "/state") && Contains("last commit") &&
                           Contains("ago"));
  auto json = run_agentctl({"--json", "--port", port, "status"});
  REQUIRE(json.exit_code == 0);
  auto state = Value::parse(json.out)["state"];
  CHECK(state["dir"] == dir.path() + "/state");
  CHECK(state["bytes"].get<std::uint64_t>() > 0);
  CHECK(state["last_commit_unix_ms"].get<std::int64_t>() > 0);
  CHECK(state["error"] == "");

  auto plain = ServerProcess::start(standard_args());
  auto none = run_agentctl({"--port", std::to_string(plain->port()), "status"});
  CHECK_THAT(none.out, Contains("memory only"));
}

TEST_CASE("agentctl clone copies an agent", "[agentctl][state]") {
  auto server = ServerProcess::start(standard_args());
  agentd::Client c = server->connect();
  auto a = c.create_agent("EchoAgent", "orig");
  a.reply(agentd::Msg("user", Value("hello"))).get();
  const std::string port = std::to_string(server->port());
  auto cloned = run_agentctl({"--json", "--port", port, "clone", a.id(), "twin", "--id", "twin-1"});
  INFO(cloned.err);
  REQUIRE(cloned.exit_code == 0);
  auto made = Value::parse(cloned.out);
  CHECK(made["id"] == "twin-1");
  CHECK(made["name"] == "twin");
  CHECK(c.agent("twin-1").memory().size() == 2);
  auto missing = run_agentctl({"--port", port, "clone", "no-such-agent"});
  CHECK(missing.exit_code != 0);
  CHECK_THAT(missing.err, Contains("no-such-agent"));
}
