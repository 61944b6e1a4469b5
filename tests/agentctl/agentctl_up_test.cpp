// `agentctl up N` / `ps` / `down`: real detached as_server processes (and agentd-gateway with
// --gateway), a private state directory.
#include "agentctl_runner.h"
#include "http_get.h"
#include "server_process.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <sys/stat.h>

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

namespace {

std::string read_cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

}  // namespace

TEST_CASE("agentctl up --gateway starts agentd-gateway in front of the servers, and down stops it too",
          "[agentctl][up][gateway]") {
  TempDir state;
  std::map<std::string, std::string> env{{"AGENTD_STATE_DIR", state.path()}};
  auto up = run_agentctl({"--json", "up", "2", "--plugin", echo_plugin(), "--gateway", "127.0.0.1:0", "--",
                          "--log-level", "warn"},
                         env);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  auto out = Value::parse(up.out);
  auto servers = out["servers"];
  REQUIRE(servers.size() == 2);
  auto gateway = out["gateway"];
  const auto gateway_port = gateway["port"].get<int>();
  const auto gateway_pid = gateway["pid"].get<pid_t>();
  CHECK(gateway_port != 0);
  CHECK(gateway["url"] == "http://127.0.0.1:" + std::to_string(gateway_port));
  CHECK(process_alive(gateway_pid));
  // In front of both servers: a cluster of the two.
  const auto cmdline = read_cmdline(gateway_pid);
  INFO(cmdline);
  CHECK(cmdline.find("--cluster " + servers[0]["address"].get<std::string>() + "," +
                     servers[1]["address"].get<std::string>()) != std::string::npos);

  // An agent on the second server answers through the gateway.
  auto create = run_agentctl({"--port", std::to_string(servers[1]["port"].get<int>()), "create", "EchoAgent",
                              "behind", "--id", "behind-the-gateway"});
  REQUIRE(create.exit_code == 0);
  const std::string body =
      R"({"model": "behind-the-gateway", "messages": [{"role": "user", "content": "through the gateway"}]})";
  auto response = http(static_cast<std::uint16_t>(gateway_port),
                       "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
                       "application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body);
  INFO(response);
  CHECK(response.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(Value::parse(body_of(response))["choices"][0]["message"]["content"] == "through the gateway");

  auto ps = run_agentctl({"--json", "ps"}, env);
  REQUIRE(ps.exit_code == 0);
  auto listed = Value::parse(ps.out);
  CHECK(listed["servers"].size() == 2);
  REQUIRE(listed["gateways"].size() == 1);
  CHECK(listed["gateways"][0]["state"] == "running");
  CHECK(listed["gateways"][0]["url"] == gateway["url"]);
  auto table = run_agentctl({"ps"}, env);
  CHECK(table.out.find("agentd-gateway " + gateway["url"].get<std::string>() + " (pid " +
                       std::to_string(gateway_pid) + ", running") != std::string::npos);

  auto down = run_agentctl({"down", "--remove-logs"}, env);
  CHECK(down.exit_code == 0);
  CHECK(down.out.find("stopped agentd-gateway " + gateway["url"].get<std::string>()) != std::string::npos);
  CHECK_FALSE(process_alive(gateway_pid));
  CHECK_FALSE(std::filesystem::exists(gateway["log"].get<std::string>()));
  CHECK(Value::parse(run_agentctl({"--json", "ps"}, env).out)["servers"].empty());
}

TEST_CASE("agentctl up --gateway: one server is --server, and a gateway that fails stops the servers too",
          "[agentctl][up][gateway]") {
  TempDir state;
  std::map<std::string, std::string> env{{"AGENTD_STATE_DIR", state.path()}};
  auto one = run_agentctl({"--json", "up", "1", "--plugin", echo_plugin(), "--gateway", "127.0.0.1:0"}, env);
  INFO(one.out << one.err);
  REQUIRE(one.exit_code == 0);
  auto out = Value::parse(one.out);
  CHECK(read_cmdline(out["gateway"]["pid"].get<pid_t>())
            .find("--server " + out["servers"][0]["address"].get<std::string>()) != std::string::npos);
  // The text form prints the URL.
  REQUIRE(run_agentctl({"down"}, env).exit_code == 0);
  auto text = run_agentctl({"up", "1", "--plugin", echo_plugin(), "--gateway", "127.0.0.1:0"}, env);
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("agentd-gateway http://127.0.0.1:") != std::string::npos);
  CHECK(text.err.find("and agentd-gateway at http://127.0.0.1:") != std::string::npos);
  REQUIRE(run_agentctl({"down"}, env).exit_code == 0);

  // Beyond loopback without a token: the gateway refuses to start, and the server goes too.
  auto refused = run_agentctl({"up", "1", "--plugin", echo_plugin(), "--gateway", "0.0.0.0:0"}, env);
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("agentd-gateway exited with status 2") != std::string::npos);
  CHECK(refused.err.find("beyond loopback") != std::string::npos);
  CHECK(Value::parse(run_agentctl({"--json", "ps"}, env).out)["servers"].empty());

  auto missing = run_agentctl({"up", "1", "--plugin", echo_plugin(), "--gateway", "127.0.0.1:0",
                               "--gateway-path", state.path() + "/nope"},
                              env);
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find(state.path() + "/nope") != std::string::npos);
  CHECK(missing.err.find("--gateway-path") != std::string::npos);
  CHECK(Value::parse(run_agentctl({"--json", "ps"}, env).out)["servers"].empty());

  CHECK(run_agentctl({"up", "1", "--gateway", "nonsense"}, env).exit_code == 2);
  CHECK(run_agentctl({"up", "1", "--gateway-arg", "--threads=1"}, env).exit_code == 2);
}

TEST_CASE("agentctl up --gateway logs the gateway in to servers that want a token",
          "[agentctl][up][gateway]") {
  TempDir state;
  std::map<std::string, std::string> env{{"AGENTD_STATE_DIR", state.path()}};
  const std::string token = "agentctl-up-gateway-token-0123456789";
  auto tokens = state.write("tokens", token + "\n");
  REQUIRE(::chmod(tokens.c_str(), 0600) == 0);
  auto up = run_agentctl({"--json", "up", "1", "--plugin", echo_plugin(), "--gateway", "127.0.0.1:0",
                          "--gateway-arg=--threads=1", "--", "--auth-token-file", tokens},
                         env);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  auto out = Value::parse(up.out);
  const auto cmdline = read_cmdline(out["gateway"]["pid"].get<pid_t>());
  CHECK(cmdline.find("--upstream-token-file " + tokens) != std::string::npos);
  CHECK(cmdline.find("--threads=1") != std::string::npos);
  auto create = run_agentctl({"--port", std::to_string(out["servers"][0]["port"].get<int>()), "--token-file",
                              tokens, "create", "EchoAgent", "e", "--id", "tokened"});
  REQUIRE(create.exit_code == 0);
  auto models = http(static_cast<std::uint16_t>(out["gateway"]["port"].get<int>()),
                     "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  INFO(models);
  CHECK(models.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(body_of(models).find("\"tokened\"") != std::string::npos);
  CHECK(run_agentctl({"down"}, env).exit_code == 0);
}
