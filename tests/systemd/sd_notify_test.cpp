// as_server's notify protocol, with this test playing systemd: it binds the datagram socket
// named by $NOTIFY_SOCKET and reads what the server sends. SdNotifier on its own is tested in
// tests/unit/server/sd_notify_test.cpp.
#include "notify_socket.h"
#include "scoped_env.h"
#include "server_process.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

using namespace agentd::test;

namespace {

bool contains(const std::vector<std::string>& msgs, const std::string& what) {
  for (const auto& m : msgs)
    if (m.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE(
    "as_server notifies READY once listening, WATCHDOG while serving, RELOADING on SIGHUP "
    "and STOPPING on SIGTERM",
    "[sd_notify][process]") {
  NotifySocket sock("@agentd-test-as-server-" + unique_suffix());
  std::unique_ptr<ServerProcess> server;
  {
    // 400 ms watchdog: as_server pings every 200 ms.
    ScopedEnv env{{"NOTIFY_SOCKET", sock.name()}, {"WATCHDOG_USEC", "400000"}, {"WATCHDOG_PID", ""}};
    ::unsetenv("WATCHDOG_PID");
    server = ServerProcess::start(standard_args());
  }
  std::vector<std::string> before_ready;
  auto ready = sock.receive_until("READY=1", before_ready, std::chrono::seconds(30));
  REQUIRE(ready);
  CHECK(ready->find("STATUS=serving on ") != std::string::npos);
  // Ready means listening: a connection is accepted right now.
  CHECK(can_connect(server->port()));
  CHECK_FALSE(contains(before_ready, "STOPPING=1"));

  // The event loop keeps pinging.
  std::vector<std::string> serving;
  for (int i = 0; i < 3; ++i) {
    auto ping = sock.receive_until("WATCHDOG=1", serving, std::chrono::seconds(10));
    REQUIRE(ping);
    CHECK(ping->find("STATUS=serving: 0 agent(s)") != std::string::npos);
  }
  CHECK_FALSE(contains(serving, "STOPPING=1"));

  // STATUS follows the work the server does.
  {
    auto client = server->connect();
    client.create_agent("EchoAgent", "e1");
    auto ping = sock.receive_until("WATCHDOG=1", serving, std::chrono::seconds(10));
    REQUIRE(ping);
    CHECK(ping->find("1 agent(s)") != std::string::npos);
  }

  // A reload is bracketed by RELOADING=1 and READY=1.
  ::kill(server->pid(), SIGHUP);
  std::vector<std::string> reloading;
  auto r1 = sock.receive_until("RELOADING=1", reloading, std::chrono::seconds(10));
  REQUIRE(r1);
  CHECK(r1->find("MONOTONIC_USEC=") != std::string::npos);
  auto r2 = sock.receive_until("READY=1", reloading, std::chrono::seconds(10));
  REQUIRE(r2);
  CHECK_FALSE(contains(reloading, "STOPPING=1"));

  auto exit = server->signal_and_wait(SIGTERM);
  CHECK(exit.exit_code == 0);
  std::vector<std::string> stopping;
  auto stop = sock.receive_until("STOPPING=1", stopping, std::chrono::seconds(5));
  REQUIRE(stop);
  // Nothing after STOPPING claims readiness again.
  std::vector<std::string> after;  // the process has exited: everything it sent is queued
  while (auto m = sock.receive(std::chrono::milliseconds(0))) after.push_back(*m);
  CHECK_FALSE(contains(after, "READY=1"));
}

TEST_CASE("as_server without NOTIFY_SOCKET runs as before", "[sd_notify][process]") {
  ScopedEnv env{{"NOTIFY_SOCKET", ""}};
  auto server = ServerProcess::start(standard_args());
  CHECK(can_connect(server->port()));
  auto exit = server->signal_and_wait(SIGTERM);
  INFO("signal " << exit.term_signal << "; stderr: " << exit.err);
  CHECK(exit.exit_code == 0);
}
