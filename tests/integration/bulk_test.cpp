// Bulk load through the public client against a real as_server: every call issued in bulk is
// answered exactly once with its own result, however many completions the server gathers into
// one loop turn; a call too big for one message fails alone; a result read after it left the
// pool fails with `expired` instead of waiting.
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;

TEST_CASE("replies issued in bulk from many threads all arrive, with a tiny result pool", "[bulk]") {
  // 4 threads each issue one reply to each of their agents before reading any. The replies are
  // 40 KB (inline, under 64 KiB), so a few thousand completions in one server loop turn are more
  // than one Cap'n Proto message carries; the pool keeps 16 results, so nothing may depend on it.
  auto server = ServerProcess::start(standard_args({"--max-pool-size", "16"}));
  ClientOptions options;
  options.timeout = std::chrono::minutes(2);
  Client c = server->connect(options);
  constexpr std::size_t kThreads = 4;
  constexpr std::size_t kPerThread = 1000;
  constexpr std::size_t kBytes = 40000;
  auto agents = c.create_agents("BlobAgent", kThreads * kPerThread);
  std::atomic<std::size_t> right{0};
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kThreads);
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Placeholder> ps;
      ps.reserve(kPerThread);
      for (std::size_t i = 0; i < kPerThread; ++i)
        ps.push_back(agents[t * kPerThread + i].reply(Msg("user", Value{{"make_bytes", kBytes}})));
      try {
        for (auto& p : ps) {
          Msg m = p.get();
          if (m.content.is_binary() && m.content.get_binary().size() == kBytes) ++right;
        }
      } catch (const Error& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& f : failures) CHECK(f.empty());
  CHECK(right.load() == kThreads * kPerThread);
  auto info = c.info();
  CHECK(info.calls_completed == kThreads * kPerThread);
  CHECK(info.calls_failed == 0);
}

TEST_CASE("one reply per agent to many agents, all in flight before any get(), arrive in order", "[bulk]") {
  // The scenario of the bulk-load report at a size CI affords (agentd-bench W9 runs it at scale).
  auto server = ServerProcess::start(standard_args({"--max-pool-size", "64"}));
  ClientOptions options;
  options.timeout = std::chrono::minutes(2);
  Client c = server->connect(options);
  constexpr std::size_t kAgents = 20000;
  auto agents = c.create_agents("EchoAgent", kAgents);
  std::vector<Placeholder> ps;
  ps.reserve(kAgents);
  for (std::size_t i = 0; i < kAgents; ++i)
    ps.push_back(agents[i].reply(Msg("user", Value(static_cast<std::int64_t>(i)))));
  std::size_t right = 0;
  for (std::size_t i = 0; i < kAgents; ++i)
    if (ps[i].get().content == Value(static_cast<std::int64_t>(i))) ++right;
  CHECK(right == kAgents);
}

TEST_CASE("a call too big for one message fails alone with too_large, and calls around it succeed",
          "[bulk]") {
  auto server = ServerProcess::start(standard_args());
  Client c = server->connect();
  AgentRef a = c.create_agent("EchoAgent");
  AgentRef sizer = c.create_agent("BlobAgent");
  auto before = a.reply(Msg("user", "before"));
  auto huge = sizer.reply(Msg("user", Value::binary(std::vector<std::uint8_t>(70u << 20, 7))));
  auto after = a.reply(Msg("user", "after"));
  Error e = error_of([&] { huge.get(); });
  CHECK(e.code() == ErrorCode::too_large);
  CHECK_THAT(e.message(), Contains("ClientOptions::max_message_bytes"));
  CHECK(before.get().text() == "before");
  CHECK(after.get().text() == "after");
  // Just under the limit still travels.
  auto big = sizer.reply(Msg("user", Value::binary(std::vector<std::uint8_t>(40u << 20, 7))));
  CHECK(big.get().content == Value{{"size", 40u << 20}});
}

TEST_CASE("a large result read after it left the pool long ago fails with expired, at once", "[bulk]") {
  // The result is too large to come back with its completion, so get() reads it afterwards; by
  // then it was evicted, and more results than the server remembers evictions of came after it.
  auto server = ServerProcess::start(standard_args({"--max-pool-size", "1"}));
  Client c = server->connect();
  AgentRef blob = c.create_agent("BlobAgent");
  AgentRef echo = c.create_agent("EchoAgent");
  auto p = blob.reply(Msg("user", Value{{"make_bytes", 100000}}));
  for (int i = 0; i < 70000; ++i) echo.reply(Msg("user", "x"));  // placeholders dropped
  echo.call("ping", Value::object());                            // all of them ran
  // A generous deadline: the read must fail, not wait (a wait would end in `timeout`).
  Error e = error_of([&] { p.get(std::chrono::seconds(20)); });
  CHECK(e.code() == ErrorCode::expired);
  CHECK_THAT(e.message(), Contains(p.call_id()));
}
