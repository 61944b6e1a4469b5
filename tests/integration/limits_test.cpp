// Limits against a real as_server: --max-message-bytes, --max-agents, --max-queued-calls and
// --max-queued-calls-per-agent refuse with too_large or overloaded naming the option; the
// connection, the server and the other agents go on; the client retries overloaded calls with
// backoff until its timeout, keeping each agent's calls in order.
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;

namespace {

ClientOptions no_retries() {
  ClientOptions o;
  o.overload_retry_initial = std::chrono::milliseconds(0);
  return o;
}

Msg text(const std::string& t) { return Msg("user", Value(t)); }

}  // namespace

TEST_CASE("a call over --max-message-bytes fails alone with too_large naming the option", "[limits]") {
  auto server = ServerProcess::start(standard_args({"--max-message-bytes", "1048576"}));
  Client c = server->connect();
  AgentRef a = c.create_agent("EchoAgent");
  AgentRef blob = c.create_agent("BlobAgent");
  auto before = a.reply(text("before"));
  // The client allows 64 MiB, so the 2 MiB call is sent; the server refuses it alone.
  auto big = blob.reply(Msg("user", Value::binary(std::vector<std::uint8_t>(2u << 20, 7))));
  auto after = a.reply(text("after"));
  Error e = error_of([&] { big.get(); });
  CHECK(e.code() == ErrorCode::too_large);
  CHECK_FALSE(e.retryable());
  CHECK_THAT(e.message(), Contains("--max-message-bytes"));
  CHECK_THAT(e.message(), Contains("1048576"));
  CHECK(before.get().text() == "before");
  CHECK(after.get().text() == "after");

  SECTION("a result over it fails its call, and the connection goes on") {
    auto made = blob.reply(Msg("user", Value{{"make_bytes", 2u << 20}}));
    Error r = error_of([&] { made.get(); });
    CHECK(r.code() == ErrorCode::too_large);
    CHECK_THAT(r.message(), Contains("--max-message-bytes"));
    // Under the limit still travels.
    auto fine = blob.reply(Msg("user", Value{{"make_bytes", 512u << 10}}));
    CHECK(fine.get().content.get_binary().size() == 512u << 10);
  }
  SECTION("other clients and agents are unharmed") {
    Client other = server->connect();
    CHECK(other.create_agent("EchoAgent").reply(text("still here")).get().text() == "still here");
    CHECK(a.reply(text("again")).get().text() == "again");
  }
}

TEST_CASE("a call over ClientOptions::max_message_bytes fails at once and is never sent", "[limits]") {
  auto server = ServerProcess::start(standard_args());
  ClientOptions options;
  options.max_message_bytes = 1u << 20;
  Client c = server->connect(options);
  AgentRef blob = c.create_agent("BlobAgent");
  const auto sent_before = c.stats().bytes_sent;
  auto big = blob.reply(Msg("user", Value::binary(std::vector<std::uint8_t>(2u << 20, 7))));
  Error e = error_of([&] { big.get(); });
  CHECK(e.code() == ErrorCode::too_large);
  CHECK_THAT(e.message(), Contains("ClientOptions::max_message_bytes"));
  CHECK_THAT(e.message(), Contains("1048576"));
  CHECK(c.stats().bytes_sent - sent_before < (64u << 10));
  auto small = blob.reply(Msg("user", Value::binary(std::vector<std::uint8_t>(100u << 10, 7))));
  CHECK(small.get().content == Value{{"size", 100u << 10}});
}

TEST_CASE(
    "creation beyond max-agents fails with overloaded naming the option, and bulk "
    "creation leaves nothing behind",
    "[limits]") {
  auto server = ServerProcess::start(standard_args({"--max-agents", "3"}));
  Client c = server->connect(no_retries());
  AgentRef first = c.create_agent("EchoAgent", "first");
  Error bulk = error_of([&] { c.create_agents("EchoAgent", 5); });
  CHECK(bulk.code() == ErrorCode::overloaded);
  CHECK(bulk.retryable());
  CHECK_THAT(bulk.message(), Contains("--max-agents 3"));
  // All or nothing: only the agent made before is left.
  CHECK(wait_until([&] { return c.list_agents().size() == 1; }, 10s));
  auto more = c.create_agents("EchoAgent", 2);
  CHECK(more.size() == 2);
  Error one = error_of([&] { c.create_agent("EchoAgent"); });
  CHECK(one.code() == ErrorCode::overloaded);
  CHECK_THAT(one.message(), Contains("--max-agents 3"));
  // The server and its agents go on.
  CHECK(first.reply(text("hi")).get().text() == "hi");

  SECTION("with retries, a creation succeeds once an agent is deleted") {
    ClientOptions patient;
    patient.timeout = std::chrono::seconds(30);
    Client p = server->connect(patient);
    std::atomic<bool> creating{false};
    std::thread deleter([&] {
      // Frees a place while the creation below is being refused and retried.
      wait_until([&] { return creating.load(); }, 10s);
      std::this_thread::yield();
      c.delete_agent(more[0].id());
    });
    creating = true;
    AgentRef made = p.create_agent("EchoAgent", "late");
    deleter.join();
    CHECK(made.reply(text("made")).get().text() == "made");
  }
  SECTION("with retries and a short timeout, the error is overloaded") {
    ClientOptions hasty;
    hasty.timeout = std::chrono::milliseconds(300);
    Client h = server->connect(hasty);
    Error late = error_of([&] { h.create_agent("EchoAgent"); });
    CHECK(late.code() == ErrorCode::overloaded);
    CHECK_THAT(late.message(), Contains("--max-agents 3"));
  }
}

TEST_CASE(
    "calls beyond max-queued-calls-per-agent are refused, and the client's retries get "
    "them all through in order",
    "[limits]") {
  auto server = ServerProcess::start(standard_args({"--max-queued-calls-per-agent", "2"}));

  SECTION("retries: ten calls to a slow agent all succeed, in order") {
    ClientOptions patient;
    patient.timeout = std::chrono::seconds(60);
    Client c = server->connect(patient);
    AgentRef slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 50}});
    AgentRef other = c.create_agent("EchoAgent", "other");
    std::vector<Placeholder> ps;
    for (int i = 0; i < 10; ++i) ps.push_back(slow.reply(text(std::to_string(i))));
    // Another agent is unharmed while the slow one is full.
    CHECK(other.reply(text("free")).get().text() == "free");
    for (int i = 0; i < 10; ++i) CHECK(ps[i].get().text() == std::to_string(i));
    // The agent heard them in the order they were made.
    std::vector<std::string> heard;
    for (const auto& m : slow.memory())
      if (m.name == "user") heard.push_back(m.text());
    std::vector<std::string> expected;
    for (int i = 0; i < 10; ++i) expected.push_back(std::to_string(i));
    CHECK(heard == expected);
    CHECK(c.info().calls_failed == 0);
  }
  SECTION("no retries: the third call fails at once with overloaded naming the limit") {
    Client c = server->connect(no_retries());
    AgentRef slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 500}});
    std::vector<Placeholder> ps;
    for (int i = 0; i < 4; ++i) ps.push_back(slow.reply(text(std::to_string(i))));
    Error e = error_of([&] { ps[2].get(); });
    CHECK(e.code() == ErrorCode::overloaded);
    CHECK(e.retryable());
    CHECK(e.agent_id() == slow.id());
    CHECK_THAT(e.message(), Contains("--max-queued-calls-per-agent 2"));
    CHECK(error_of([&] { ps[3].get(); }).code() == ErrorCode::overloaded);
    CHECK(ps[0].get().text() == "0");
    CHECK(ps[1].get().text() == "1");
    // Refused calls left nothing behind: once the agent is free, calls go through.
    CHECK(slow.reply(text("later")).get().text() == "later");
  }
  SECTION("retries with a short timeout: the error is overloaded") {
    ClientOptions hasty;
    hasty.timeout = std::chrono::milliseconds(300);
    Client c = server->connect(hasty);
    AgentRef slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 2000}});
    std::vector<Placeholder> ps;
    for (int i = 0; i < 3; ++i) ps.push_back(slow.reply(text(std::to_string(i))));
    Error e = error_of([&] { ps[2].get(std::chrono::seconds(30)); });
    CHECK(e.code() == ErrorCode::overloaded);
    CHECK_THAT(e.message(), Contains("--max-queued-calls-per-agent 2"));
    CHECK(ps[0].get(std::chrono::seconds(30)).text() == "0");
  }
}

TEST_CASE("calls beyond the server's max-queued-calls fail with overloaded naming it", "[limits]") {
  auto server = ServerProcess::start(standard_args({"--max-queued-calls", "3"}));
  Client c = server->connect(no_retries());
  auto agents = c.create_agents("EchoAgent", 3, Value{{"sleep_ms", 500}});
  auto a0 = agents[0].reply(text("a"));
  auto a1 = agents[1].reply(text("b"));
  auto a2 = agents[2].reply(text("c"));
  auto over = agents[0].reply(text("d"));
  Error e = error_of([&] { over.get(); });
  CHECK(e.code() == ErrorCode::overloaded);
  CHECK_THAT(e.message(), Contains("--max-queued-calls 3"));
  CHECK(a0.get().text() == "a");
  CHECK(a1.get().text() == "b");
  CHECK(a2.get().text() == "c");
  // Capacity is back once they finished.
  CHECK(agents[0].reply(text("e")).get().text() == "e");
}

TEST_CASE("limits are read from the YAML config too", "[limits]") {
  TempDir dir;
  auto path = dir.write("server.yaml",
                        "max-agents: 1\nmax-queued-calls: 10\nmax-queued-calls-per-agent: 5\n"
                        "max-message-bytes: 1048576\n");
  auto server = ServerProcess::start(standard_args({"--config", path}));
  Client c = server->connect(no_retries());
  c.create_agent("EchoAgent");
  Error e = error_of([&] { c.create_agent("EchoAgent"); });
  CHECK(e.code() == ErrorCode::overloaded);
  CHECK_THAT(e.message(), Contains("--max-agents 1"));
}

TEST_CASE("limit options are validated", "[limits]") {
  auto r = run_as_server(standard_args({"--max-message-bytes", "1000"}));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--max-message-bytes"));
  auto big = run_as_server(standard_args({"--max-message-bytes", "134217728"}));
  CHECK(big.exit_code == 2);
  CHECK_THAT(big.err, Contains("64 MiB"));
}
