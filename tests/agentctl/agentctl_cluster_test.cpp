// agentctl --cluster: status, list and ps over every member, a member down, and membership from a
// DNS name with several addresses (three servers on 127.0.0.1-3, one port, and a name that
// resolves to all three through nss_wrapper's hosts file).
#include "agentctl_runner.h"
#include "sanitizers.h"
#include "server_process.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <set>

#ifdef AGENTD_TEST_TSAN
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif

using namespace agentd::test;
using agentd::Value;

TEST_CASE("agentctl --cluster shows every member's status, agents and process", "[agentctl][cluster]") {
  auto a = ServerProcess::start(standard_args());
  auto b = ServerProcess::start(standard_args());
  a->connect().create_agent("EchoAgent", "on-a");
  b->connect().create_agents("EchoAgent", 2, Value::object(), "on-b-");
  const std::string spec = fmt::format("127.0.0.1:{},127.0.0.1:{}", a->port(), b->port());

  auto status = run_agentctl({"--cluster", spec, "--json", "status"});
  INFO(status.err);
  REQUIRE(status.exit_code == 0);
  auto s = Value::parse(status.out);
  CHECK(s["up"] == 2);
  CHECK(s["agents"] == 3);
  REQUIRE(s["members"].size() == 2);
  CHECK(s["members"][0]["info"]["server_id"] == a->server_id());
  CHECK(s["members"][1]["info"]["agents"] == 2);

  auto list = run_agentctl({"--cluster", spec, "list"});
  REQUIRE(list.exit_code == 0);
  CHECK_THAT(list.out, Catch::Contains("SERVER") && Catch::Contains("on-a") && Catch::Contains("on-b-1") &&
                           Catch::Contains(fmt::format("127.0.0.1:{}", b->port())));
  auto ps = run_agentctl({"--cluster", spec, "--json", "ps"});
  REQUIRE(ps.exit_code == 0);
  CHECK(Value::parse(ps.out)["members"][1]["info"]["pid"] == b->pid());

  // A member down: still shown, named, and the exit code says so.
  b->kill_now();
  auto partial = run_agentctl({"--cluster", spec, "status"});
  CHECK(partial.exit_code == 3);
  CHECK_THAT(partial.out, Catch::Contains("down") && Catch::Contains("1 of 2 servers up"));
  auto partial_list = run_agentctl({"--cluster", spec, "list"});
  CHECK(partial_list.exit_code == 3);
  CHECK_THAT(partial_list.out, Catch::Contains("on-a"));
  CHECK_THAT(partial_list.err, Catch::Contains(fmt::format("127.0.0.1:{}", b->port())));

  // Commands that act on one agent refuse --cluster before sending anything.
  auto call = run_agentctl({"--cluster", spec, "call", "x", "hi"});
  CHECK(call.exit_code == 2);
  CHECK_THAT(call.err, Catch::Contains("--host/--port"));
  auto missing = run_agentctl({"--cluster", "no-such-cluster.yaml", "status"});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::Contains("no-such-cluster.yaml"));
}

TEST_CASE("agentctl --cluster dns:NAME:PORT reaches every address the name resolves to",
          "[agentctl][cluster]") {
  // nss_wrapper (Debian's libnss-wrapper, installed by scripts/setup.sh) answers host lookups
  // from a hosts file of ours: the way to give a test a name with several addresses.
  const std::string nss_wrapper = AGENTD_NSS_WRAPPER;
  REQUIRE_FALSE(nss_wrapper.empty());  // scripts/setup.sh installs libnss-wrapper
  auto port = unused_port();
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (const char* host : {"127.0.0.1", "127.0.0.2", "127.0.0.3"})
    servers.push_back(ServerProcess::start(
        {"--host", host, "--port", std::to_string(port), "--plugin", echo_plugin(), "--log-level", "warn"}));
  TempDir dir;
  auto hosts = dir.write("hosts",
                         "127.0.0.1 agents.cluster.test\n127.0.0.2 agents.cluster.test\n"
                         "127.0.0.3 agents.cluster.test\n127.0.0.1 localhost\n");
  std::string preload = AGENTD_SANITIZER_PRELOAD_FOR_TESTS;
  preload += (preload.empty() ? "" : ":") + nss_wrapper;
  std::map<std::string, std::string> env{{"LD_PRELOAD", preload}, {"NSS_WRAPPER_HOSTS", hosts}};
  if (preload != nss_wrapper) {
    // Sanitizer build: nss_wrapper keeps its caches to the end, which LeakSanitizer would report.
    const char* asan = std::getenv("ASAN_OPTIONS");
    env["ASAN_OPTIONS"] = std::string(asan ? asan : "") + (asan && *asan ? ":" : "") + "detect_leaks=0";
  }

  auto status =
      run_agentctl({"--cluster", fmt::format("dns:agents.cluster.test:{}", port), "--json", "status"}, env);
  INFO(status.err);
  REQUIRE(status.exit_code == 0);
  auto s = Value::parse(status.out);
  REQUIRE(s["members"].size() == 3);
  std::set<std::string> ids, addresses;
  for (const auto& m : s["members"]) {
    CHECK(m["up"] == true);
    CHECK(m["source"] == fmt::format("dns:agents.cluster.test:{}", port));
    ids.insert(m["info"]["server_id"].get<std::string>());
    addresses.insert(m["address"].get<std::string>());
  }
  CHECK(ids ==
        std::set<std::string>{servers[0]->server_id(), servers[1]->server_id(), servers[2]->server_id()});
  CHECK(addresses.count(fmt::format("127.0.0.2:{}", port)) == 1);

  // A name that resolves to nothing is a clear error. Not under clang's ASan or ThreadSanitizer:
  // for a name outside its hosts file nss_wrapper dlopens libc with RTLD_DEEPBIND, which their
  // runtimes refuse (the same error without nss_wrapper is tests/unit/cluster/membership_test.cpp's).
  if (!kThreadSanitizer &&
      (preload == nss_wrapper ||
       std::string(AGENTD_SANITIZER_PRELOAD_FOR_TESTS).find("libasan") != std::string::npos)) {
    auto unknown =
        run_agentctl({"--cluster", fmt::format("dns:nowhere.cluster.test:{}", port), "status"}, env);
    CHECK(unknown.exit_code == 1);
    CHECK_THAT(unknown.err, Catch::Contains("nowhere.cluster.test") && Catch::Contains("resolve"));
  }
}
