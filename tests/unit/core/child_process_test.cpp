// parse_ready_line: the one stdout line as_server prints when it is ready; ChildProcess starts
// as_server, learns its port, and stops it.
#include "child_process.h"

#include "server_process.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <signal.h>

using agentd::detail::ChildProcess;
using agentd::detail::parse_ready_line;
using namespace std::chrono_literals;

TEST_CASE("the ready line gives host, port and server id", "[child_process]") {
  std::string host, id;
  std::uint16_t port = 0;
  REQUIRE(parse_ready_line("as_server ready: listening on 127.0.0.1:40123 server_id=abc123 pid=77",
                           host, port, id));
  CHECK(host == "127.0.0.1");
  CHECK(port == 40123);
  CHECK(id == "abc123");

  REQUIRE(parse_ready_line("as_server ready: listening on ::1:5 server_id=x pid=1", host, port, id));
  CHECK(host == "::1");
  CHECK(port == 5);
}

TEST_CASE("other lines are not ready lines", "[child_process]") {
  std::string host, id;
  std::uint16_t port = 0;
  CHECK_FALSE(parse_ready_line("", host, port, id));
  CHECK_FALSE(parse_ready_line("as_server starting", host, port, id));
  CHECK_FALSE(parse_ready_line("as_server ready: listening on nowhere server_id=x", host, port, id));
  CHECK_FALSE(parse_ready_line("as_server ready: listening on h:notaport server_id=x", host, port, id));
}

TEST_CASE("ChildProcess starts as_server on a free port and stops it", "[child_process]") {
  auto child = ChildProcess::start(agentd::test::as_server_path(),
                                   {"--plugin", agentd::test::echo_plugin(), "--log-level", "warn"},
                                   30s);
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

TEST_CASE("split_host_port takes host:port and refuses anything else", "[child_process]") {
  std::string host;
  std::uint16_t port = 0;
  REQUIRE(agentd::detail::split_host_port("127.0.0.1:12310", host, port));
  CHECK(host == "127.0.0.1");
  CHECK(port == 12310);
  REQUIRE(agentd::detail::split_host_port("agents.example:1", host, port));
  CHECK(host == "agents.example");
  for (const char* bad : {"local", "host:", ":80", "host:0", "host:65536", "host:12x", "host:-1"})
    CHECK_FALSE(agentd::detail::split_host_port(bad, host, port));
}
