#include <agentd/agentd.h>

#include <catch2/catch.hpp>
#include <server_process.h>

#include <string>
#include <vector>

using namespace agentd;
using agentd::test::ServerProcess;
using agentd::test::standard_args;
using namespace std::chrono_literals;

TEST_CASE("a 100-agent pipelined chain on one server costs the client one wait", "[flow]") {
  auto server = ServerProcess::start(standard_args());
  auto c = server->connect();
  std::vector<AgentRef> agents;
  for (int i = 0; i < 100; ++i) agents.push_back(c.create_agent("TrailAgent", "a" + std::to_string(i)));

  auto before = c.stats();
  Placeholder x = agents[0].reply(Msg("user", "x"));
  for (int i = 1; i < 100; ++i) x = agents[i].reply(x);
  Msg out = x.get();
  auto after = c.stats();

  std::string expected = "x";
  for (int i = 0; i < 100; ++i) expected += ">a" + std::to_string(i);
  CHECK(out.text() == expected);
  CHECK(after.waits - before.waits == 1);          // one blocking round trip: the final get()
  CHECK(after.requests - before.requests == 101);  // 100 replies sent without waiting, 1 get
  // Awaiting each call instead costs one wait per call.
  auto b2 = c.stats();
  Msg y = Msg("user", "y");
  for (int i = 0; i < 10; ++i) y = agents[i].reply(y).get();
  CHECK(c.stats().waits - b2.waits == 10);
}

TEST_CASE("a 1 MiB hand-off between servers does not pass through the client", "[flow]") {
  auto s1 = ServerProcess::start(standard_args());
  auto s2 = ServerProcess::start(standard_args());
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  auto producer = c1.create_agent("BlobAgent", "producer");
  auto consumer = c2.create_agent("BlobAgent", "consumer");

  auto c1_before = c1.stats();
  auto c2_before = c2.stats();
  auto peer_before = c2.info().bytes_peer_in;

  Placeholder blob = producer.reply(Msg("user", Value{{"make_bytes", 1 << 20}}));
  Msg size = consumer.reply(blob).get();
  REQUIRE(size.content.at("size") == (1 << 20));

  auto through_client = (c1.stats().bytes_received - c1_before.bytes_received) +
                        (c1.stats().bytes_sent - c1_before.bytes_sent) +
                        (c2.stats().bytes_received - c2_before.bytes_received) +
                        (c2.stats().bytes_sent - c2_before.bytes_sent);
  CHECK(through_client < 16 * 1024);
  // The consuming server fetched the megabyte from the producing server directly.
  CHECK(c2.info().bytes_peer_in - peer_before >= (1u << 20));

  // Many readers: the main process and another consumer read the same result.
  CHECK(blob.get().content.get_binary().size() == (1u << 20));
  auto consumer2 = c2.create_agent("BlobAgent", "consumer2");
  CHECK(consumer2.reply(blob).get().content.at("size") == (1 << 20));
}

TEST_CASE("dataflow: independent branches run in parallel, results are exact", "[flow]") {
  // A->B, A->C, B->D, C->D (D observes C then replies to B), E->F, D->F; every reply sleeps.
  auto s1 = ServerProcess::start(standard_args());
  auto s2 = ServerProcess::start(standard_args());
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  Value slow{{"sleep_ms", 300}};
  auto A = c1.create_agent("EchoAgent", "A", Value{{"prefix", "A:"}, {"sleep_ms", 300}});
  auto B = c1.create_agent("EchoAgent", "B", Value{{"prefix", "B:"}, {"sleep_ms", 300}});
  auto C = c2.create_agent("EchoAgent", "C", Value{{"prefix", "C:"}, {"sleep_ms", 300}});
  auto D = c2.create_agent("EchoAgent", "D", Value{{"prefix", "D:"}, {"sleep_ms", 300}});
  auto E = c1.create_agent("EchoAgent", "E", Value{{"prefix", "E:"}, {"sleep_ms", 300}});
  auto F = c1.create_agent("EchoAgent", "F", Value{{"prefix", "F:"}, {"sleep_ms", 300}});

  auto t0 = std::chrono::steady_clock::now();
  Placeholder a = A(Msg("user", "x"));
  Placeholder b = B(a);
  Placeholder c = C(a);
  D.observe(c);
  Placeholder d = D(b);
  Placeholder e = E(Msg("user", "y"));
  F.observe(e);
  Placeholder f = F(d);
  Msg out = f.get();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  CHECK(out.text() == "F:D:B:A:x");
  CHECK(c.get().text() == "C:A:x");
  // Critical path A, B, D, F = 4 sleeps; sequential would be 6. Generous bound for noisy machines.
  CHECK(took < 6 * 0.3);
  auto mem = D.memory();
  REQUIRE(mem.size() == 3);  // observed C's reply, heard B's reply, said its own
  CHECK(mem[0].text() == "C:A:x");
  CHECK(mem[1].text() == "B:A:x");
}

TEST_CASE("an error flows down a chain across servers naming the agent that failed", "[flow]") {
  auto s1 = ServerProcess::start(standard_args());
  auto s2 = ServerProcess::start(standard_args());
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  auto flaky = c1.create_agent("FlakyAgent", "flaky", Value::object(), "flaky-1");
  auto t1 = c2.create_agent("TrailAgent", "t1");
  auto t2 = c1.create_agent("TrailAgent", "t2");
  Placeholder p = t2(t1(flaky(Msg("user", "fail"))));
  try {
    p.get();
    FAIL("the chain should have failed");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::agent_failed);
    CHECK(e.agent_id() == "flaky-1");
    CHECK(e.agent_class() == "FlakyAgent");
    CHECK(std::string(e.what()).find("asked to fail") != std::string::npos);
  }
  // The consumers never ran on the failed input, and still work.
  CHECK(t1.memory().empty());
  CHECK(t2(Msg("user", "ok")).get().text() == "ok>t2");
}

TEST_CASE("nested agents: an agent calls an agent on another server it got in its args", "[flow]") {
  auto s1 = ServerProcess::start(standard_args());
  auto s2 = ServerProcess::start(standard_args());
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  auto inner = c1.create_agent("EchoAgent", "inner", Value{{"prefix", "inner:"}});
  auto relay = c2.create_agent("RelayAgent", "relay", Value{{"target", inner.to_value()}});
  CHECK(relay(Msg("user", "hi")).get().text() == "relayed: inner:hi");
  CHECK(inner.call("count") == 1);
  CHECK(AgentRef::is_ref(inner.to_value()));
  CHECK(AgentRef::from_value(inner.to_value()).call("ping") == "pong");
}

TEST_CASE("call_async returns a placeholder another agent can consume", "[flow]") {
  auto s1 = ServerProcess::start(standard_args());
  auto c = s1->connect();
  auto e = c.create_agent("EchoAgent", "e");
  auto t = c.create_agent("TrailAgent", "t");
  Placeholder sum = e.call_async("add", Value{{"a", 2}, {"b", 3}});
  CHECK(sum.get().content == 5.0);
  CHECK(t(sum).get().text() == "5.0>t");
}

TEST_CASE("a server that dies mid-chain fails its dependants with a retryable error", "[flow]") {
  auto s1 = ServerProcess::start(standard_args());
  // s2 tries to fetch from s1 again (it may be restarting) until its --peer-connect-timeout.
  auto s2 = ServerProcess::start(standard_args({"--peer-connect-timeout", "2"}));
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  auto slow = c1.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 5000}});
  auto t = c2.create_agent("TrailAgent", "t");
  Placeholder p = t(slow(Msg("user", "x")));
  REQUIRE(agentd::test::wait_until([&] { return c1.list_agents().at(0).queued_calls > 0; }, 10s));
  s1->kill_now();
  try {
    p.get(std::chrono::seconds(20));
    FAIL("should fail");
  } catch (const Error& e) {
    CHECK(e.retryable());
    CHECK(e.code() != ErrorCode::timeout);
  }
}

TEST_CASE("servers count a peer's fetch connection as peer traffic, not client traffic", "[flow]") {
  auto s1 = ServerProcess::start(standard_args());
  auto s2 = ServerProcess::start(standard_args());
  auto c1 = s1->connect();
  auto c2 = s2->connect();
  auto producer = c1.create_agent("BlobAgent", "producer");
  auto consumer = c2.create_agent("BlobAgent", "consumer");
  auto before = c1.info();
  CHECK(
      consumer.reply(producer.reply(Msg("user", Value{{"make_bytes", 1 << 20}}))).get().content.at("size") ==
      (1 << 20));
  auto after = c1.info();
  CHECK(after.bytes_peer_out - before.bytes_peer_out >= (1u << 20));
  CHECK(after.bytes_client_out - before.bytes_client_out < 16 * 1024);
}

TEST_CASE("an agent reference without a reachable address is refused clearly", "[flow]") {
  Value not_ref{{"id", "x"}};
  try {
    AgentRef::from_value(not_ref);
    FAIL("should throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::bad_args);
  }
  Value local_ref{{"agentd_agent_ref", {{"id", "x"}, {"address", "local"}}}};
  try {
    AgentRef::from_value(local_ref);
    FAIL("should throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::bad_args);
    CHECK(std::string(e.what()).find("local mode") != std::string::npos);
  }
}
