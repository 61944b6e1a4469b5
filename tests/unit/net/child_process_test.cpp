// ChildProcess starts as_server, waits for its ready line (ready_line.h), learns its port, and
// stops it.
#include "child_process.h"

#include "server_process.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <signal.h>

using agentd::detail::ChildProcess;
using namespace std::chrono_literals;

TEST_CASE("ChildProcess starts as_server on a free port and stops it", "[child_process]") {
  auto child = ChildProcess::start(agentd::test::as_server_path(),
                                   {"--plugin", agentd::test::echo_plugin(), "--log-level", "warn"}, 30s);
  CHECK(child->port() != 0);
  CHECK(child->host() == "127.0.0.1");
  CHECK_FALSE(child->server_id().empty());
  pid_t pid = child->pid();
  CHECK(agentd::test::process_alive(pid));
  CHECK(agentd::test::can_connect(child->port()));
  child->stop(10s);
  CHECK_FALSE(agentd::test::process_alive(pid));
  CHECK(::kill(pid, 0) != 0);  // reaped, not a zombie
}

TEST_CASE("ChildProcess reports a server that exits before it is ready", "[child_process]") {
  try {
    ChildProcess::start(agentd::test::as_server_path(), {"--plugin", "/nonexistent/libx.so"}, 30s);
    FAIL("expected an error");
  } catch (const agentd::Error& e) {
    CHECK_THAT(e.message(), Catch::Matchers::Contains("status 4"));
  }
  try {
    ChildProcess::start("/nonexistent/as_server", {}, 5s);
    FAIL("expected an error");
  } catch (const agentd::Error& e) {
    CHECK_THAT(e.message(), Catch::Matchers::Contains("/nonexistent/as_server"));
  }
}
