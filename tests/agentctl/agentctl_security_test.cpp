// agentctl against servers that require a token, and over a Unix socket.
#include "agentctl_runner.h"
#include "server_process.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>

using namespace agentd::test;
using agentd::Value;

TEST_CASE("agentctl logs in with --token-file or $AGENTD_TOKEN, and says how when refused",
          "[agentctl][security]") {
  TempDir dir;
  const std::string token = "agentctl-test-token-0123456789abcdef";
  auto tokens = dir.write("tokens", token + "\n");
  REQUIRE(::chmod(tokens.c_str(), 0600) == 0);
  const std::string socket = dir.path() + "/a.sock";
  auto s = ServerProcess::start(standard_args({"--auth-token-file", tokens, "--unix-socket", socket}));
  const std::string port = std::to_string(s->port());
  std::map<std::string, std::string> no_env{{"AGENTD_TOKEN", ""}};

  auto ok = run_agentctl({"--json", "--port", port, "--token-file", tokens, "status"}, no_env);
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  CHECK(Value::parse(ok.out)["server_id"] == s->server_id());
  auto from_env = run_agentctl({"--port", port, "ping"}, {{"AGENTD_TOKEN", token}});
  CHECK(from_env.exit_code == 0);
  auto over_unix =
      run_agentctl({"--json", "--host", "unix:" + socket, "--token-file", tokens, "status"}, no_env);
  CHECK(over_unix.exit_code == 0);

  auto refused = run_agentctl({"--port", port, "status"}, no_env);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("unauthenticated") && Catch::Contains("--token-file"));
  REQUIRE(::chmod(tokens.c_str(), 0644) == 0);
  auto open_file = run_agentctl({"--port", port, "--token-file", tokens, "status"}, no_env);
  CHECK(open_file.exit_code == 2);  // a bad option: nothing was sent
  CHECK_THAT(open_file.err, Catch::Contains("chmod 600"));
}
