// What a new user meets with agentctl: a token file others can read is a bad option (exit 2,
// nothing sent, no unrelated hint), a failed TLS handshake gets a TLS hint, `delete A B C` goes on past an
// unknown id and says so, agents are named by a unique name too, `reload` names its file in errors and says
// loudly which model configs it removed, `up -- --plugin X` loads X alone, `ps` shows dead servers as dead
// and `down` keeps the logs.
#include "agentctl_runner.h"
#include "server_process.h"

#include <agentd/client.h>

#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

using namespace agentd::test;
using agentd::Value;
using Catch::Contains;

TEST_CASE("agentctl: a token file others can read is a usage error, with no unrelated hint",
          "[agentctl][newuser]") {
  TempDir dir;
  auto tokens = dir.write("tokens", "agentctl-test-token-0123456789abcdef\n");
  REQUIRE(::chmod(tokens.c_str(), 0644) == 0);
  auto r = run_agentctl({"--port", "1", "--token-file", tokens, "status"}, {{"AGENTD_TOKEN", ""}});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains(tokens) && Contains("chmod 600"));
  CHECK_THAT(r.err, !Contains("previous configs") && !Contains("hint:"));
}

TEST_CASE("agentctl: a failed TLS handshake gets a TLS hint, not 'is as_server running?'",
          "[agentctl][newuser]") {
  TempDir dir;
  const auto ca = dir.path() + "/ca.pem";
  const auto make_ca =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
      "-keyout " +
      dir.path() + "/ca.key -out " + ca + " -subj /CN=agentd-test -days 1 >/dev/null 2>&1";
  if (std::system(make_ca.c_str()) != 0) {
    WARN("no openssl command to make a CA: not checked");
    return;
  }
  // A plaintext server: the handshake fails although the server runs.
  auto s = ServerProcess::start(standard_args());
  auto r = run_agentctl({"--port", std::to_string(s->port()), "--tls-ca", ca, "status"});
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, Contains("TLS handshake") && Contains("hint:") && Contains("--tls-cert"));
  CHECK_THAT(r.err, !Contains("is as_server running"));
}

TEST_CASE("agentctl delete A B C deletes every agent there is and names the ones that are not",
          "[agentctl][newuser]") {
  auto s = ServerProcess::start(standard_args());
  const std::string port = std::to_string(s->port());
  auto c = s->connect();
  c.create_agent("EchoAgent", "a", Value::object(), "id-a");
  c.create_agent("EchoAgent", "c", Value::object(), "id-c");
  auto r = run_agentctl({"--port", port, "delete", "id-a", "no-such", "id-c"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("deleted id-a") && Contains("deleted id-c"));
  CHECK_THAT(r.err, Contains("no-such") && Contains("unknown_agent") && Contains("deleted 2 of 3"));
  CHECK(c.list_agents().empty());

  c.create_agent("EchoAgent", "x", Value::object(), "id-x");
  auto j = run_agentctl({"--json", "--port", port, "delete", "nope", "id-x"});
  CHECK(j.exit_code == 1);
  auto v = Value::parse(j.out);
  CHECK(v["deleted"] == Value::array({"id-x"}));
  CHECK(v["failed"][0]["agent"] == "nope");
  CHECK(v["failed"][0]["code"] == "unknown_agent");
}

TEST_CASE("agentctl names an agent by its id or by its name when the name is unique", "[agentctl][newuser]") {
  auto s = ServerProcess::start(standard_args());
  const std::string port = std::to_string(s->port());
  auto c = s->connect();
  c.create_agent("EchoAgent", "alice", Value::object(), "id-alice");
  auto by_name = run_agentctl({"--port", port, "call", "alice", "hello"});
  INFO(by_name.err);
  CHECK(by_name.exit_code == 0);
  CHECK_THAT(by_name.out, Contains("hello"));
  CHECK(run_agentctl({"--port", port, "memory", "alice"}).exit_code == 0);

  c.create_agent("EchoAgent", "twin", Value::object(), "id-t1");
  c.create_agent("EchoAgent", "twin", Value::object(), "id-t2");
  auto twins = run_agentctl({"--port", port, "call", "twin", "hi"});
  CHECK(twins.exit_code == 2);
  CHECK_THAT(twins.err, Contains("2 agents are named 'twin'") && Contains("id-t1") && Contains("id-t2"));
  auto del = run_agentctl({"--port", port, "delete", "alice"});
  CHECK(del.exit_code == 0);
  CHECK_THAT(del.out, Contains("deleted id-alice"));
}

TEST_CASE("agentctl reload names its file in errors and says which model configs it removed",
          "[agentctl][newuser]") {
  TempDir dir;
  auto s = ServerProcess::start(standard_args());
  const std::string port = std::to_string(s->port());
  auto two = dir.write("two.yaml",
                       "- {config_name: alpha, model_type: echo}\n"
                       "- {config_name: beta, model_type: echo}\n");
  auto r1 = run_agentctl({"--port", port, "reload", "--file", two});
  INFO(r1.err);
  CHECK(r1.exit_code == 0);
  CHECK_THAT(r1.err, !Contains("warning"));

  auto one = dir.write("one.yaml", "- {config_name: beta, model_type: echo}\n");
  auto r2 = run_agentctl({"--port", port, "reload", "--file", one});
  CHECK(r2.exit_code == 0);
  CHECK_THAT(r2.err, Contains("warning") && Contains("alpha") && Contains(one));
  CHECK_THAT(r2.err, !Contains("beta"));

  auto bad = dir.write("bad.yaml", "- config_name: z\n  model_type: telepathy\n");
  auto r3 = run_agentctl({"--port", port, "reload", "--file", bad});
  CHECK(r3.exit_code == 1);
  CHECK_THAT(r3.err, Contains(bad) && !Contains("setModelConfigs"));
  CHECK_THAT(r3.err, Contains("previous configs"));
}

TEST_CASE("agentctl up honours -- --plugin, ps shows a dead server as dead, down keeps the logs",
          "[agentctl][newuser][up]") {
  TempDir state;
  std::map<std::string, std::string> env{{"AGENTD_STATE_DIR", state.path()}};
  auto up = run_agentctl({"--json", "up", "1", "--", "--plugin", echo_plugin()}, env);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  auto server = Value::parse(up.out)["servers"][0];
  const auto port = std::to_string(server["port"].get<int>());
  const auto pid = server["pid"].get<pid_t>();
  const auto log = server["log"].get<std::string>();
  auto status = Value::parse(run_agentctl({"--json", "--port", port, "status"}).out);
  // Only the plugin named after `--`: not also every example class (WebAgent, DialogAgent...).
  CHECK(std::find(status["classes"].begin(), status["classes"].end(), "EchoAgent") !=
        status["classes"].end());
  CHECK(std::find(status["classes"].begin(), status["classes"].end(), "WebAgent") == status["classes"].end());

  REQUIRE(::kill(pid, SIGKILL) == 0);
  REQUIRE(wait_until([&] { return !process_alive(pid); }, std::chrono::seconds(10)));
  auto ps = run_agentctl({"--json", "ps"}, env);
  REQUIRE(ps.exit_code == 0);
  auto listed = Value::parse(ps.out)["servers"];
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["state"] == "dead");
  auto table = run_agentctl({"ps"}, env);
  CHECK_THAT(table.out, Contains("dead"));

  auto down = run_agentctl({"down"}, env);
  CHECK(down.exit_code == 0);
  CHECK_THAT(down.out, Contains("had died"));
  CHECK_THAT(down.err, Contains("--remove-logs"));
  CHECK(std::filesystem::exists(log));
  CHECK(Value::parse(run_agentctl({"--json", "ps"}, env).out)["servers"].empty());
}
