// Placeholders between agents: chains on one server, hand-offs between two servers (fetched
// peer to peer, never through the main process), many readers, errors flowing down a chain,
// duplicate call ids, expiry from the result pool, and get(timeout).
#include "raw_login.h"
#include "server_process.h"
#include "value_codec.h"
#include "test_names.h"

#include <agentd/client.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <error_of.h>
#include <kj/async-io.h>

using namespace agentd::test;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;

}  // namespace

TEST_CASE("a chain of 100 agents on one server gives the right trail", "[placeholders]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  std::vector<AgentRef> agents;
  std::string expect = "x";
  for (int i = 0; i < 100; ++i) {
    agents.push_back(c.create_agent("TrailAgent", "T" + std::to_string(i)));
    expect += ">T" + std::to_string(i);
  }
  auto before = c.stats();
  Placeholder p = agents[0].reply(Msg("user", "x"));
  for (int i = 1; i < 100; ++i) p = agents[i].reply(p);
  CHECK(p.get().content == expect);
  // The main program blocked once for the whole chain (no per-hop round trip).
  CHECK(c.stats().waits - before.waits == 1);
  // Every agent saw exactly its part of the trail.
  auto mem = agents[50].memory();
  REQUIRE(mem.size() == 2);
  CHECK(mem[1].content.get<std::string>().size() > mem[0].content.get<std::string>().size());
}

TEST_CASE("a placeholder is a value: passed before it is ready, read by many", "[placeholders]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 300}});
  auto p = slow.reply(Msg("user", "shared"));
  std::vector<Placeholder> readers;
  for (int i = 0; i < 5; ++i)
    readers.push_back(c.create_agent("TrailAgent", "R" + std::to_string(i)).reply(p));
  for (int i = 0; i < 5; ++i) CHECK(readers[i].get().content == "shared>R" + std::to_string(i));
  CHECK(p.get().content == "shared");
  CHECK(p.get().content == "shared");  // read again
  CHECK(p.call_id().size() == 32);
  CHECK(p.origin() == c.address());
}

TEST_CASE("placeholders cross servers, fetched peer to peer", "[placeholders][peer]") {
  auto s1 = ServerProcess::start(standard_args());
  auto s2 = ServerProcess::start(standard_args());
  auto c1 = s1->connect();
  auto c2 = s2->connect();

  SECTION("a trail that hops between two servers") {
    auto a = c1.create_agent("TrailAgent", "A");
    auto b = c2.create_agent("TrailAgent", "B");
    auto cc = c1.create_agent("TrailAgent", "C");
    auto d = c2.create_agent("TrailAgent", "D");
    Placeholder x = a.reply(Msg("user", "s"));
    x = b.reply(x);
    x = cc.reply(x);
    x = d.reply(x);
    CHECK(x.get().content == "s>A>B>C>D");
    CHECK(c2.info().bytes_peer_in > 0);
    CHECK(c1.info().bytes_peer_in > 0);
  }

  SECTION("a 1 MiB message goes from server 1 to server 2 without the main process") {
    auto blob = c1.create_agent("BigTextAgent", "blob", Value{{"bytes", kMiB}});
    auto size = c2.create_agent("TextSizeAgent", "size");
    auto before2 = c2.info();
    auto main1 = c1.stats();
    auto main2 = c2.stats();
    auto q = size.reply(blob.reply(Msg("user", "go")));
    auto m = q.get();
    CHECK(m.content["size"] == kMiB);
    CHECK(m.content["head"] == "bbbbbbbb");
    auto after2 = c2.info();
    // Server 2 fetched the message from server 1 over its peer connection ...
    CHECK(after2.bytes_peer_in - before2.bytes_peer_in >= kMiB);
    // ... and the main process's connections carried a few KiB, not the message.
    CHECK(after2.bytes_client_in - before2.bytes_client_in < 64 * 1024);
    CHECK(after2.bytes_client_out - before2.bytes_client_out < 64 * 1024);
    auto end1 = c1.stats();
    auto end2 = c2.stats();
    CHECK(end1.bytes_received - main1.bytes_received < 64 * 1024);
    CHECK(end1.bytes_sent - main1.bytes_sent < 64 * 1024);
    CHECK(end2.bytes_received - main2.bytes_received < 64 * 1024);
  }

  SECTION("one placeholder read on both servers and by the main process") {
    auto src = c1.create_agent("EchoAgent", "src", Value{{"sleep_ms", 200}});
    auto p = src.reply(Msg("user", "many"));
    std::vector<Placeholder> outs;
    for (int i = 0; i < 3; ++i)
      outs.push_back(c1.create_agent("TrailAgent", "L" + std::to_string(i)).reply(p));
    for (int i = 0; i < 3; ++i)
      outs.push_back(c2.create_agent("TrailAgent", "R" + std::to_string(i)).reply(p));
    CHECK(p.get().content == "many");
    for (int i = 0; i < 3; ++i) {
      CHECK(outs[i].get().content == "many>L" + std::to_string(i));
      CHECK(outs[3 + i].get().content == "many>R" + std::to_string(i));
    }
  }

  SECTION("an error crosses servers down a chain, naming the original agent") {
    auto flaky = c1.create_agent("FlakyAgent", "F", Value::object(), "flaky-x");
    auto t1 = c1.create_agent("TrailAgent", "T1");
    auto t2 = c2.create_agent("TrailAgent", "T2");
    auto t3 = c2.create_agent("TrailAgent", "T3");
    auto p3 = t3.reply(t2.reply(t1.reply(flaky.reply(Msg("user", "fail")))));
    auto e = error_of([&] { p3.get(std::chrono::seconds(30)); });
    CHECK(e.code() == ErrorCode::agent_failed);
    CHECK(e.agent_id() == "flaky-x");
    CHECK(e.agent_class() == "FlakyAgent");
    CHECK_THAT(e.message(), Contains("asked to fail"));
    // The consumers never ran, and stay usable.
    CHECK(t2.memory().empty());
    CHECK(t3.reply(Msg("user", "ok")).get().content == "ok>T3");
  }
}

TEST_CASE("an error flows down a chain on one server, naming the agent that failed", "[placeholders]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto flaky = c.create_agent("FlakyAgent", "F", Value::object(), "flaky-1");
  Placeholder p = flaky.reply(Msg("user", "fail"));
  std::vector<Placeholder> chain;
  for (int i = 0; i < 10; ++i) {
    p = c.create_agent("TrailAgent", "T" + std::to_string(i)).reply(p);
    chain.push_back(p);
  }
  for (auto& q : chain) {
    auto e = error_of([&] { q.get(std::chrono::seconds(30)); });
    CHECK(e.code() == ErrorCode::agent_failed);
    CHECK(e.agent_id() == "flaky-1");
    CHECK(e.agent_class() == "FlakyAgent");
    CHECK_THAT(e.message(), Contains("asked to fail"));
  }
  // Calls queued on a consumer after the failed one still run.
  auto t = c.create_agent("TrailAgent", "after");
  auto failed = t.reply(flaky.reply(Msg("user", "fail")));
  auto ok = t.reply(Msg("user", "ok"));
  CHECK(ok.get().content == "ok>after");
  CHECK(error_of([&] { failed.get(); }).agent_id() == "flaky-1");
}

TEST_CASE("a duplicate call id is refused and the first result kept", "[placeholders][wire]") {
  auto s = ServerProcess::start(standard_args());
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", s->port()).wait(ws);
  auto stream = addr->connect().wait(ws);
  capnp::TwoPartyClient rpc(*stream);
  auto server = agentd::test::raw_login(rpc);

  auto create = server.createAgentRequest();
  create.setClassName("EchoAgent");
  create.setAgentId("e");
  create.initArgs().initObject(0);
  auto created = create.send().wait(ws);
  REQUIRE_FALSE(created.hasError());
  auto agent = created.getAgent();

  {
    auto req = agent.replyRequest();
    req.setCallId("same-call-id");
    agentd::detail::write_msg(Msg("user", "first"), req.initInput().initMsg());
    auto got = req.send().getResult().getRequest().send().wait(ws);
    REQUIRE(got.getOutcome().isMsg());
    CHECK(agentd::detail::read_msg(got.getOutcome().getMsg()).content == "first");
  }
  auto e = [&] {
    auto req = agent.replyRequest();
    req.setCallId("same-call-id");
    agentd::detail::write_msg(Msg("user", "second"), req.initInput().initMsg());
    auto got = req.send().getResult().getRequest().send().wait(ws);
    REQUIRE(got.getOutcome().isError());
    return agentd::detail::read_error(got.getOutcome().getError());
  }();
  CHECK(e.code() == ErrorCode::duplicate_call_id);
  CHECK_THAT(e.message(), Contains("same-call-id"));
  CHECK(e.agent_id() == "e");

  // callAsync with a taken id too.
  auto async = agent.callAsyncRequest();
  async.setMethod("ping");
  async.initArgs().initObject(0);
  async.setCallId("same-call-id");
  auto a = async.send().getResult().getRequest().send().wait(ws);
  REQUIRE(a.getOutcome().isError());
  CHECK(agentd::detail::read_error(a.getOutcome().getError()).code() == ErrorCode::duplicate_call_id);

  // The first call's result is untouched, and the agent ran only once.
  auto fetch = server.fetchRequest();
  fetch.setCallId("same-call-id");
  auto f = fetch.send().wait(ws);
  REQUIRE(f.getOutcome().isMsg());
  CHECK(agentd::detail::read_msg(f.getOutcome().getMsg()).content == "first");
  auto count = agent.callRequest();
  count.setMethod("count");
  count.initArgs().initObject(0);
  auto n = count.send().wait(ws);
  REQUIRE(n.getOutcome().isValue());
  CHECK(agentd::detail::read_value(n.getOutcome().getValue()) == 1);
}

TEST_CASE("results evicted from the pool give an expired error naming the call", "[placeholders]") {
  auto s = ServerProcess::start(standard_args({"--max-pool-size", "2"}));
  auto c = s->connect();
  auto echo = c.create_agent("EchoAgent", "E");
  auto p1 = echo.reply(Msg("user", 1));
  auto p2 = echo.reply(Msg("user", 2));
  auto p3 = echo.reply(Msg("user", 3));
  CHECK(p3.get().content == 3);  // the agent runs in order: p1 and p2 are done too
  // Small results reach the main process eagerly, so its own reads still succeed...
  CHECK(p1.get().content == 1);
  CHECK(p2.get().content == 2);
  // ...but an agent consuming an evicted placeholder gets `expired`, naming the call.
  auto t = c.create_agent("TrailAgent", "T");
  auto e2 = error_of([&] { t.reply(p1).get(std::chrono::seconds(30)); });
  CHECK(e2.code() == ErrorCode::expired);
  CHECK_THAT(e2.message(), Contains(p1.call_id()));
  CHECK(c.info().max_pool_size == 2);
}

TEST_CASE("get(timeout) gives a retryable timeout, and the placeholder stays usable", "[placeholders]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto slow = c.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 1000}}, "slow");
  auto p = slow.reply(Msg("user", "eventually"));
  auto e = error_of([&] { p.get(std::chrono::milliseconds(50)); });
  CHECK(e.code() == ErrorCode::timeout);
  CHECK(e.retryable());
  CHECK(e.agent_id() == "slow");
  CHECK_THAT(e.message(), Contains(p.call_id()));
  CHECK(p.get(std::chrono::seconds(30)).content == "eventually");
}

TEST_CASE("a large evicted result is expired for the main process too", "[placeholders]") {
  auto s = ServerProcess::start(standard_args({"--max-pool-size", "1"}));
  auto c = s->connect();
  auto blob = c.create_agent("BlobAgent", "B");
  auto big = blob.reply(Msg("user", Value{{"make_bytes", 256 * 1024}}));  // above the inline limit
  auto small = blob.reply(Msg("user", Value{{"make_bytes", 1}}));
  CHECK(small.get().content.get_binary().size() == 1);  // evicts `big` (pool size 1)
  auto e = error_of([&] { big.get(std::chrono::seconds(30)); });
  CHECK(e.code() == ErrorCode::expired);
  CHECK_THAT(e.message(), Contains(big.call_id()));
}
