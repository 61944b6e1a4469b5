// Faults a client must survive: a refused connection, a server killed mid-call, calls on a
// dead connection. Each is a retryable agentd::Error, never a hang.
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <signal.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;

namespace {}  // namespace

TEST_CASE("connecting where no server listens is a retryable disconnected error", "[failures]") {
  auto port = unused_port();
  auto e = error_of([&] { Client::connect("127.0.0.1", port); });
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("127.0.0.1:" + std::to_string(port)));
}

TEST_CASE("a server killed mid-call fails the pending placeholder, retryable, no hang", "[failures]") {
  auto s = ServerProcess::start(standard_args());
  agentd::ClientOptions opts;
  opts.timeout = std::chrono::seconds(30);  // a hang would surface as a timeout, not a pass
  // Nothing restarts the server: the client gives up reconnecting after this and fails all.
  opts.reconnect_deadline = std::chrono::seconds(2);
  auto c = s->connect(opts);
  auto slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 1000}});
  auto before = slow.reply(Msg("user", "asked before"));
  auto chained = c.create_agent("TrailAgent", "T").reply(before);
  c.ping();  // the server has the calls
  s->kill_now();

  auto e = error_of([&] { before.get(); });
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(e.retryable());
  auto e2 = error_of([&] { chained.get(); });
  CHECK(e2.code() == ErrorCode::disconnected);
  CHECK(e2.retryable());

  // Everything else on the dead connection fails the same way.
  auto e3 = error_of([&] { c.ping(); });
  CHECK(e3.code() == ErrorCode::disconnected);
  CHECK(e3.retryable());
  auto e4 = error_of([&] { slow.reply(Msg("user", "after")).get(); });
  CHECK(e4.code() == ErrorCode::disconnected);
  CHECK(error_of([&] { slow.call("ping"); }).retryable());
  CHECK(error_of([&] { c.create_agent("EchoAgent"); }).retryable());
}

TEST_CASE("a server killed while a result is being awaited wakes the waiter", "[failures]") {
  auto s = ServerProcess::start(standard_args());
  agentd::ClientOptions opts;
  opts.reconnect_deadline = std::chrono::seconds(1);  // no restart comes: give up soon
  auto c = s->connect(opts);
  auto slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 20000}});
  auto p = slow.reply(Msg("user", "x"));
  std::optional<Error> seen;
  std::thread waiter([&] {
    try {
      p.get(std::chrono::seconds(60));
    } catch (const Error& e) {
      seen = e;
    }
  });
  c.ping();
  ::kill(s->pid(), SIGKILL);
  waiter.join();
  REQUIRE(seen);
  CHECK(seen->code() == ErrorCode::disconnected);
  CHECK(seen->retryable());
}

TEST_CASE("close() fails a request waiting for a server that is reconnecting at once, not at the timeout",
          "[failures]") {
  auto s = ServerProcess::start(standard_args());
  agentd::ClientOptions opts;
  opts.timeout = std::chrono::seconds(60);
  opts.reconnect_deadline = std::chrono::hours(1);  // the client keeps trying: the request waits
  auto c = s->connect(opts);
  c.ping();
  s->kill_now();
  std::optional<Error> seen;
  std::chrono::steady_clock::duration waited{};
  std::thread waiter([&] {
    // A request sent before the client has read the kill's reset goes out on the dead connection
    // and fails with it (disconnected, as any request in flight there); the next one waits for
    // the reconnection, which is the request this test is about.
    for (int attempt = 0; attempt < 20; ++attempt) {
      try {
        c.list_agents();
        return;
      } catch (const Error& e) {
        seen = e;
        if (e.code() != ErrorCode::disconnected ||
            e.message().find("the client is closed") != std::string::npos)
          return;
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the request is waiting
  const auto t0 = std::chrono::steady_clock::now();
  c.close();
  waiter.join();
  waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(seen);
  INFO(seen->what());
  CHECK(seen->code() == ErrorCode::disconnected);
  CHECK_THAT(seen->message(), Catch::Contains("the client is closed"));
  CHECK(waited < std::chrono::seconds(10));
  // And every later request fails at once the same way.
  CHECK(error_of([&] { c.ping(); }).code() == ErrorCode::disconnected);
}

TEST_CASE("close() while other threads keep calling: each request answers or fails as closed", "[failures]") {
  // A request that found the client open hands its work to the connection's thread while
  // close() takes that thread down: the hand-over must finish before the thread's state goes
  // (ThreadSanitizer saw it race with the state's destruction, an eventfd written as it closed).
  // And a call made as close() ran was left unsent in the hand-over queue, its get() waiting
  // for good: it now fails as closed like the others.
  auto s = ServerProcess::start(standard_args());
  for (int round = 0; round < 10; ++round) {
    auto c = s->connect();
    auto agent = c.create_agent("EchoAgent", "e" + std::to_string(round));
    std::atomic<bool> stop{false};
    std::atomic<int> answered{0};
    std::mutex mu;
    std::vector<std::string> unexpected;  // guarded by mu
    std::vector<std::thread> callers;
    for (int t = 0; t < 3; ++t)
      callers.emplace_back([&, t] {
        while (!stop) {
          try {
            if (t == 0) {
              c.ping();
            } else if (auto got = agent.reply(Msg("user", "hi")).get().text(); got != "hi") {
              std::lock_guard lock(mu);  // (Catch's assertions are for the test's own thread)
              unexpected.push_back("the echo answered '" + got + "'");
            }
            ++answered;
          } catch (const Error& e) {
            if (e.code() != ErrorCode::disconnected) {
              std::lock_guard lock(mu);
              unexpected.push_back(e.what());
            }
          }
        }
      });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (answered < 20 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    c.close();
    stop = true;
    for (auto& t : callers) t.join();
    CHECK(answered >= 20);
    CHECK(unexpected.empty());
    CHECK(error_of([&] { c.ping(); }).code() == ErrorCode::disconnected);
  }
}

TEST_CASE("a peer server that dies fails the consumer's placeholder, retryable", "[failures][peer]") {
  auto s1 = ServerProcess::start(standard_args());
  // Server 2 retries the fetch from the dead server until --peer-connect-timeout (it might be
  // restarting), then fails the consumer.
  auto s2 = ServerProcess::start(standard_args({"--peer-connect-timeout", "2"}));
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  auto slow = c1.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 20000}});
  auto consumer = c2.create_agent("TrailAgent", "T");
  auto q = consumer.reply(slow.reply(Msg("user", "x")));
  c1.ping();
  c2.ping();
  // Once server 2 is fetching from server 1, kill server 1.
  REQUIRE(wait_until([&] { return c2.info().bytes_peer_out > 0; }, 20s));
  s1->kill_now();
  auto e = error_of([&] { q.get(std::chrono::seconds(60)); });
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(e.retryable());
  // Server 2 is fine.
  CHECK(consumer.reply(Msg("user", "ok")).get().content == "ok>T");
}
