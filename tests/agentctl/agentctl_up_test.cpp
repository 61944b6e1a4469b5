// `agentctl up N` / `ps` / `down`: real detached as_server processes, a private state directory.
#include "agentctl_runner.h"
#include "server_process.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

using namespace agentd::test;
using agentd::Value;

TEST_CASE("agentctl up starts servers that answer, ps lists them and down stops them", "[agentctl][up]") {
  TempDir state;
  std::map<std::string, std::string> env{{"AGENTD_STATE_DIR", state.path()}};
  auto up = run_agentctl({"--json", "up", "2", "--plugin", echo_plugin(), "--", "--log-level", "warn"}, env);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  auto servers = Value::parse(up.out)["servers"];
  REQUIRE(servers.size() == 2);
  CHECK(servers[0]["port"] != servers[1]["port"]);
  CHECK(std::filesystem::exists(state.path() + "/servers.json"));

  for (const auto& s : servers) {
    auto port = std::to_string(s["port"].get<int>());
    auto status = run_agentctl({"--json", "--port", port, "status"});
    REQUIRE(status.exit_code == 0);
    auto info = Value::parse(status.out);
    CHECK(info["server_id"] == s["server_id"]);
    CHECK(info["pid"] == s["pid"]);
    CHECK(std::find(info["classes"].begin(), info["classes"].end(), "EchoAgent") != info["classes"].end());
    CHECK(process_alive(s["pid"].get<pid_t>()));
  }

  auto ps = run_agentctl({"--json", "ps"}, env);
  REQUIRE(ps.exit_code == 0);
  CHECK(Value::parse(ps.out)["servers"].size() == 2);

  auto down = run_agentctl({"down"}, env);
  CHECK(down.exit_code == 0);
  for (const auto& s : servers) {
    CHECK(down.out.find("stopped " + s["address"].get<std::string>()) != std::string::npos);
    CHECK_FALSE(process_alive(s["pid"].get<pid_t>()));
    auto ping = run_agentctl({"--port", std::to_string(s["port"].get<int>()), "ping"});
    CHECK(ping.exit_code == 3);
  }
  CHECK_FALSE(std::filesystem::exists(state.path() + "/servers.json"));

  auto again = run_agentctl({"down"}, env);
  CHECK(again.exit_code == 0);
  CHECK(again.out == "no servers started by `agentctl up` are running\n");
}

TEST_CASE("agentctl up reports why a server did not start", "[agentctl][up]") {
  TempDir state;
  std::map<std::string, std::string> env{{"AGENTD_STATE_DIR", state.path()}};
  auto r = run_agentctl({"up", "1", "--plugin", state.path() + "/no-such-plugin.so"}, env);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("exited with status 4 (plugin error)") != std::string::npos);
  CHECK(r.err.find("no-such-plugin.so") != std::string::npos);
  auto ps = run_agentctl({"--json", "ps"}, env);
  CHECK(Value::parse(ps.out)["servers"].empty());

  auto usage = run_agentctl({"up", "zero"}, env);
  CHECK(usage.exit_code == 2);
}
