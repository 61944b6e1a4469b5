// as_server's life: the ready line, SIGTERM/SIGINT (running replies finish within the grace,
// queued ones fail with `stopping`, exit 0), the stop RPC, and a reply that outlasts the grace.
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <signal.h>

#include <regex>

using namespace agentd::test;

TEST_CASE("the ready line names the bound address, the server id and the pid", "[lifecycle]") {
  auto s = ServerProcess::start(standard_args({"--server-id", "srv-ready"}));
  std::smatch m;
  const std::string line = s->ready_line();
  REQUIRE(std::regex_match(
      line, m, std::regex(R"(as_server ready: listening on ([0-9.]+):(\d+) server_id=(\S+) pid=(\d+))")));
  CHECK(m[1] == "127.0.0.1");
  CHECK(std::stoi(m[2]) == s->port());
  CHECK(s->port() != 0);
  CHECK(m[3] == "srv-ready");
  CHECK(std::stoi(m[4]) == s->pid());
  CHECK(can_connect(s->port()));
  auto c = s->connect();
  CHECK(c.server_id() == "srv-ready");
  CHECK(c.port() == s->port());
  CHECK(c.address() == "127.0.0.1:" + std::to_string(s->port()));
}

TEST_CASE("without --server-id each server gets its own generated id", "[lifecycle]") {
  auto a = ServerProcess::start(standard_args());
  auto b = ServerProcess::start(standard_args());
  CHECK_FALSE(a->server_id().empty());
  CHECK(a->server_id() != b->server_id());
  CHECK(a->port() != b->port());
}

TEST_CASE("SIGTERM and SIGINT stop the server gracefully: the running reply finishes, exit 0",
          "[lifecycle]") {
  int sig = GENERATE(SIGTERM, SIGINT);
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 1000}});
  auto running = slow.reply(Msg("user", "last words"));
  auto queued = slow.reply(Msg("user", "never runs"));
  // Ask for both results now (a zero timeout sends the request and returns), then make sure the
  // server has received everything (one connection delivers in order) before the signal.
  CHECK_THROWS(running.get(std::chrono::milliseconds(0)));
  CHECK_THROWS(queued.get(std::chrono::milliseconds(0)));
  c.ping();
  ::kill(s->pid(), sig);

  Msg m = running.get(std::chrono::seconds(20));
  CHECK(m.content == "last words");
  try {
    queued.get(std::chrono::seconds(20));
    FAIL("a call queued behind the running one must not run after the stop");
  } catch (const agentd::Error& e) {
    CHECK(e.code() == ErrorCode::stopping);
    CHECK(e.retryable());
  }
  auto r = s->wait_exit(20s);
  CHECK(r.exit_code == 0);
  CHECK_FALSE(can_connect(s->port()));
  CHECK_THAT(s->stderr_text(), !Contains(" error "));  // a clean stop logs no error
}

TEST_CASE("the stop request stops the server with exit 0", "[lifecycle]") {
  auto s = ServerProcess::start(standard_args());
  {
    auto c = s->connect();
    c.create_agent("EchoAgent", "e").reply(Msg("user", "hi")).get();
    c.stop();
  }
  auto r = s->wait_exit(20s);
  CHECK(r.exit_code == 0);
}

TEST_CASE("a reply that outlasts the shutdown grace does not keep the server alive", "[lifecycle]") {
  auto s = ServerProcess::start(standard_args({"--shutdown-grace", "0.2"}));
  auto c = s->connect();
  auto stuck = c.create_agent("EchoAgent", "stuck", Value{{"sleep_ms", 60000}});
  auto p = stuck.reply(Msg("user", "x"));
  c.ping();
  // The reply would take a minute; the server must be gone long before that.
  auto r = s->signal_and_wait(SIGTERM, 20s);
  CHECK(r.exit_code == 0);
  try {
    p.get(std::chrono::seconds(20));
    FAIL("the result of an abandoned call cannot arrive");
  } catch (const agentd::Error& e) {
    CHECK(e.retryable());
  }
}
