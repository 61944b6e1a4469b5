// Clients that survive server restarts (ClientOptions::reconnect_*): a client whose as_server is
// killed and restarted on the same port carries on; calls in flight at the kill are looked up by
// call id (interrupted when the server came back as another one without its state; the
// retry-safety tests cover restarts with --state-dir); calls made while the server is
// down wait for it; past reconnect_deadline everything fails with disconnected; a dead child is
// reported with its signal and stderr; a peer fetch from a vanished origin retries until
// --peer-connect-timeout. Real servers, real sockets, no fixed sleeps.
#include "loopback.h"
#include "server_process.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace agentd;
using namespace agentd::test;

namespace {

ClientOptions fast_reconnect(std::chrono::milliseconds deadline = 30s) {
  ClientOptions o;
  o.reconnect_initial = 20ms;
  o.reconnect_max = 200ms;
  o.reconnect_deadline = deadline;
  o.timeout = 60s;
  return o;
}

}  // namespace

TEST_CASE("reconnect: a client survives kill -9 and a restart on the same port", "[reconnect]") {
  auto s = ServerProcess::start(standard_args());
  const std::uint16_t port = s->port();
  auto c = s->connect(fast_reconnect());
  auto echo = c.create_agent("EchoAgent", "E");
  CHECK(echo.reply(Msg("user", "before")).get().content == "before");
  const std::string first_id = c.server_id();

  s->kill_now();
  s = restart_on(port);
  // The agents went with the old server (no --state-dir): create them again.
  auto again = c.create_agent("EchoAgent", "E2");
  CHECK(again.reply(Msg("user", "after")).get().content == "after");
  CHECK(c.info().server_id == s->server_id());
  CHECK(c.server_id() == s->server_id());
  CHECK(c.server_id() != first_id);
  CHECK_NOTHROW(c.ping());
  // The same AgentRef still works after the restart: the agent is made again under its id.
  auto fresh = c.create_agent("EchoAgent", "E3", Value::object(), echo.id());
  CHECK(echo.reply(Msg("user", "same ref")).get().content == "same ref");
  (void)fresh;
}

TEST_CASE("reconnect: over a unix: socket too", "[reconnect][unix]") {
  TempDir dir;
  const std::string sock = dir.path() + "/as.sock";
  auto s = ServerProcess::start(standard_args({"--unix-socket", sock}));
  auto c = Client::connect("unix:" + sock, 0, fast_reconnect());
  auto a = c.create_agent("EchoAgent", "A");
  CHECK(a.reply(Msg("user", "one")).get().content == "one");
  s->kill_now();
  std::filesystem::remove(sock);  // a killed server leaves its socket file behind
  s = ServerProcess::start(standard_args({"--unix-socket", sock}));
  auto b = c.create_agent("EchoAgent", "B");
  CHECK(b.reply(Msg("user", "two")).get().content == "two");
  CHECK(c.server_id() == s->server_id());
}

TEST_CASE(
    "reconnect: calls in flight at a server that came back without its state are "
    "interrupted, finished ones stay readable",
    "[reconnect]") {
  auto s = ServerProcess::start(standard_args());
  const std::uint16_t port = s->port();
  auto c = s->connect(fast_reconnect());
  auto fast = c.create_agent("EchoAgent", "fast");
  auto slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 60000}});
  Placeholder done = fast.reply(Msg("user", "done"));
  CHECK(done.get().content == "done");
  Placeholder pending = slow.reply(Msg("user", "never"));
  Placeholder pending_method = slow.call_async("count");
  // Answered after the calls made before it, on the same connection: both reached the server.
  CHECK(c.info().calls_queued >= 1);

  s->kill_now();
  s = restart_on(port);

  // Without --state-dir the new server is another one: it cannot tell whether the old one was
  // running the calls (the first was), so neither is offered as safe to retry.
  auto e = error_of([&] { pending.get(); });
  CHECK(e.code() == ErrorCode::interrupted);
  CHECK_FALSE(e.retryable());
  CHECK_THAT(e.message(), Catch::Contains("another server") && Catch::Contains("not safe to retry") &&
                              Catch::Contains(std::to_string(port)));
  auto e2 = error_of([&] { pending_method.get(); });
  CHECK(e2.code() == ErrorCode::interrupted);
  // Finished before the kill: its result came with its completion and stays readable.
  CHECK(done.get().content == "done");
  // Retrying is safe: the call runs once on the new server.
  auto again = c.create_agent("EchoAgent", "again");
  CHECK(again.reply(Msg("user", "retried")).get().content == "retried");
}

TEST_CASE("reconnect: calls made while the server is down wait and succeed once it is back", "[reconnect]") {
  auto s = ServerProcess::start(standard_args());
  const std::uint16_t port = s->port();
  auto c = s->connect(fast_reconnect());
  CHECK_NOTHROW(c.ping());
  s->kill_now();
  // Until the restart: no other test's server is given the port while this one is down.
  PortReservation down(port);
  // The client sees the connection close at once (the kernel closes a killed process's
  // sockets); this wait only makes sure the calls below are made after the kill.
  REQUIRE(wait_until([&] { return !can_connect(port); }, 10s));
  // Made while nothing listens: they wait for the reconnect instead of failing.
  auto created = std::async(std::launch::async, [&c] {
    auto a = c.create_agent("EchoAgent", "late");
    return a.reply(Msg("user", "waited")).get();
  });
  auto info = std::async(std::launch::async, [&c] { return c.info(); });
  CHECK(created.wait_for(300ms) == std::future_status::timeout);  // still waiting, not failed
  s = restart_on(port);  // binds beside the reservation (both are SO_REUSEADDR, neither listens)
  CHECK(created.get().content == "waited");
  CHECK(info.get().server_id == s->server_id());
}

TEST_CASE("reconnect: with the server gone for good, calls fail after reconnect_deadline", "[reconnect]") {
  auto s = ServerProcess::start(standard_args());
  const std::uint16_t port = s->port();
  auto c = s->connect(fast_reconnect(1500ms));
  auto a = c.create_agent("EchoAgent", "A");
  s->kill_now();
  // For good: no other test's server is given the port, so the client finds nobody there.
  PortReservation gone(port);
  const auto t0 = std::chrono::steady_clock::now();
  auto e = error_of([&] { a.reply(Msg("user", "x")).get(); });
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Catch::Contains("127.0.0.1:" + std::to_string(port)) &&
                              Catch::Contains("1500 ms") && Catch::Contains("last error"));
  CHECK(waited >= 1s);  // it waited for the deadline rather than failing at once
  CHECK(waited < 30s);
  // Later calls fail at once with the same story.
  auto e2 = error_of([&] { c.ping(); });
  CHECK(e2.code() == ErrorCode::disconnected);
  CHECK_THAT(e2.message(), Catch::Contains("could not reconnect"));
}

TEST_CASE("reconnect: reconnect_deadline 0 keeps failing at once", "[reconnect]") {
  auto s = ServerProcess::start(standard_args());
  const std::uint16_t port = s->port();
  ClientOptions o;
  o.reconnect_deadline = 0ms;
  auto c = s->connect(o);
  auto a = c.create_agent("EchoAgent", "A");
  s->kill_now();
  const auto t0 = std::chrono::steady_clock::now();
  auto e = error_of([&] {
    // The loss may not have been seen yet: the first calls may still go out and fail.
    for (;;) a.reply(Msg("user", "x")).get();
  });
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  s = restart_on(port);
  // No reconnect: the client stays broken.
  CHECK(error_of([&] { c.ping(); }).code() == ErrorCode::disconnected);
}

TEST_CASE("reconnect: a child that is killed is reported with its signal and stderr", "[reconnect][child]") {
  ChildOptions o;
  o.plugins = {echo_plugin()};
  o.server_path = as_server_path();
  o.extra_args = {"--log-level", "info"};  // something on stderr to quote
  auto c = Client::spawn_child(o);
  const auto pid = c.info().pid;
  auto a = c.create_agent("EchoAgent", "A", Value{{"sleep_ms", 60000}});
  Placeholder p = a.reply(Msg("user", "x"));
  REQUIRE(::kill(static_cast<pid_t>(pid), SIGKILL) == 0);
  auto e = error_of([&] { p.get(); });
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK_THAT(e.message(), Catch::Contains("pid " + std::to_string(pid)) && Catch::Contains("signal 9") &&
                              Catch::Contains("stderr"));
  auto e2 = error_of([&] { c.ping(); });
  CHECK(e2.code() == ErrorCode::disconnected);
  CHECK_THAT(e2.message(), Catch::Contains("signal 9"));
}

TEST_CASE(
    "reconnect: a peer fetch from an origin that went away retries until "
    "--peer-connect-timeout, then fails retryable",
    "[reconnect][peer]") {
  auto a_server = ServerProcess::start(standard_args());
  auto b_server = ServerProcess::start(standard_args({"--peer-connect-timeout", "3"}));
  auto ca = a_server->connect(fast_reconnect(1s));
  auto cb = b_server->connect();
  auto slow = ca.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 60000}});
  auto consumer = cb.create_agent("EchoAgent", "consumer");
  Placeholder p = slow.reply(Msg("user", "x"));
  Placeholder q = consumer.reply(p);   // B fetches p from A, which is still running it
  CHECK(cb.info().calls_queued >= 1);  // answered after the call reached B
  const auto t0 = std::chrono::steady_clock::now();
  a_server->kill_now();
  auto e = error_of([&] { q.get(std::chrono::milliseconds(60000)); });
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(e.retryable());
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK_THAT(e.message(), Catch::Contains(std::to_string(a_server->port())));
  CHECK(waited >= 1500ms);  // retried rather than failing at once
  CHECK(waited < 30s);      // and did not hang
}
