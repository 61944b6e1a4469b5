// PeerPool: a server fetching the result of a placeholder from the server that made the call
// (its origin), here a real Server listening on 127.0.0.1 (a free port) on the same loop as the
// pool. The results are made through the origin's bootstrap capability in process.
#include "peer_pool.h"

#include "server.h"
#include "server_process.h"
#include "value_codec.h"
#include "gate.h"

#include <agentd/agent.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <kj/async-io.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

using namespace agentd;
using namespace agentd::detail;
using Catch::Matchers::Contains;

namespace {

agentd::test::Gate pool_gate;  // GateAgent / GatedAgent replies wait on it

class EchoAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override { return Msg(name(), x.text()); }
};

class GatedAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    pool_gate.wait();
    return Msg(name(), x.text());
  }
};

ServerOptions origin_options(const std::string& id, int port = 0) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.server_id = id;
  return o;
}

// The origin: a listening Server on this thread's loop.
struct Origin {
  Origin(kj::AsyncIoContext& io, const std::string& id, int port = 0)
      : io_(io),
        server(origin_options(id, port), io,
               {agent_class<EchoAgent>("EchoAgent"), agent_class<GatedAgent>("GatedAgent")}),
        address(fmt::format("127.0.0.1:{}", server.listen())) {}

  // Creates agent id of class cls on the origin.
  void create(const std::string& cls, const std::string& id) {
    auto req = server.bootstrap().createAgentRequest();
    req.setClassName(to_kj(cls));
    req.setAgentId(to_kj(id));
    auto r = req.send().wait(io_.waitScope);
    REQUIRE_FALSE(r.hasError());
  }
  // Queues a reply of agent to text under call_id; returns at once (the call may run on).
  void start_call(const std::string& agent, const std::string& call_id, const std::string& text) {
    auto get = server.bootstrap().agentRequest();
    get.setId(to_kj(agent));
    auto req = get.send().getAgent().replyRequest();
    write_msg(Msg("user", text, "user"), req.initInput().initMsg());
    req.setCallId(to_kj(call_id));
    req.setInlineLimit(0);
    req.send().wait(io_.waitScope);
  }

  kj::AsyncIoContext& io_;
  detail::Server server;
  std::string address;  // host:port
};

struct Fixture {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::unique_ptr<Origin> origin = std::make_unique<Origin>(io, "origin-1");
  ByteCount bytes;
  PeerPool::Options options;
  std::unique_ptr<PeerPool> pool;
  std::vector<OutcomePtr> outs;  // what the fetches handed to their waiters, in order

  explicit Fixture(PeerPool::Options o = {.connect_timeout = std::chrono::seconds(5),
                                          .fetch_timeout = std::chrono::seconds(60),
                                          .token = {},
                                          .tls = nullptr})
      : options(o), pool(std::make_unique<PeerPool>(io, options, &bytes)) {
    pool_gate.set(true);
  }
  ~Fixture() {
    pool_gate.set(true);  // no worker may stay blocked in a GatedAgent
    pool.reset();
  }

  void fetch(const std::string& origin_address, const std::string& server_id, const std::string& call_id) {
    pool->fetch(origin_address, server_id, call_id, [this](const OutcomePtr& o) { outs.push_back(o); });
  }

  bool pump_until(const std::function<bool()>& pred,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred() && std::chrono::steady_clock::now() < deadline)
      io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(io.waitScope);
    return pred();
  }
};

const Msg* msg_of(const OutcomePtr& o) { return std::get_if<Msg>(o.get()); }
const Error* outcome_error(const OutcomePtr& o) { return std::get_if<Error>(o.get()); }

}  // namespace

TEST_CASE("PeerPool fetches a finished result from its origin", "[peer_pool]") {
  Fixture f;
  f.origin->create("EchoAgent", "a");
  f.origin->start_call("a", "call-1", "hello from the origin");
  f.origin->start_call("a", "call-2", "second");
  REQUIRE(f.pump_until([&] { return f.origin->server.stats().calls_ok == 2; }));

  f.fetch(f.origin->address, "origin-1", "call-1");
  REQUIRE(f.pump_until([&] { return f.outs.size() == 1; }));
  const Msg* m = msg_of(f.outs[0]);
  REQUIRE(m != nullptr);
  CHECK(m->text() == "hello from the origin");
  CHECK(m->name == "a");
  CHECK(f.pool->fetches() == 1);
  CHECK(f.bytes.in > 0);
  // The origin counts what it served as peer traffic.
  CHECK(f.origin->server.stats().bytes.peer.out > 0);

  // A placeholder without a server id (the check is skipped) is fetched the same way.
  f.fetch(f.origin->address, "", "call-2");
  REQUIRE(f.pump_until([&] { return f.outs.size() == 2; }));
  REQUIRE(msg_of(f.outs[1]) != nullptr);
  CHECK(msg_of(f.outs[1])->text() == "second");
  CHECK(f.pool->fetches() == 2);
}

TEST_CASE("several consumers of one call cost one transfer", "[peer_pool]") {
  Fixture f;
  const std::size_t size = GENERATE(200 * 1024, 1024 * 1024);
  INFO("a result of " << size << " bytes");
  const std::string big(size, 'p');
  // Results up to 256 KiB are kept for later consumers; a larger one only serves the consumers
  // that wait on its fetch (Options::cache_entry_bytes).
  const bool kept = size < (256 << 10);
  f.origin->create("GatedAgent", "g");
  pool_gate.set(false);
  f.origin->start_call("g", "call-big", big);

  // Consumers arrive while the call still runs at the origin: they share one fetch.
  for (int i = 0; i < 5; ++i) f.fetch(f.origin->address, "origin-1", "call-big");
  REQUIRE(f.pump_until([&] { return f.origin->server.stats().calls_running == 1; }));
  CHECK(f.outs.empty());
  pool_gate.set(true);
  REQUIRE(f.pump_until([&] { return f.outs.size() == 5; }));
  for (const auto& o : f.outs) {
    REQUIRE(msg_of(o) != nullptr);
    CHECK(msg_of(o)->text() == big);
  }
  CHECK(f.pool->fetches() == 1);
  const auto in_after_first = f.bytes.in;
  CHECK(in_after_first >= big.size());
  CHECK(in_after_first < 2 * big.size());

  // A later consumer is answered from the cache, at once and without traffic; or, for a large
  // result, by a second fetch.
  f.fetch(f.origin->address, "origin-1", "call-big");
  if (kept) {
    REQUIRE(f.outs.size() == 6);
    CHECK(f.pool->fetches() == 1);
    CHECK(f.bytes.in == in_after_first);
  } else {
    REQUIRE(f.pump_until([&] { return f.outs.size() == 6; }));
    CHECK(f.pool->fetches() == 2);
    CHECK(f.bytes.in >= in_after_first + big.size());
  }
  REQUIRE(msg_of(f.outs[5]) != nullptr);
  CHECK(msg_of(f.outs[5])->text() == big);
}

TEST_CASE(
    "an unreachable origin is tried again until the connect timeout, then fails the "
    "fetch with a retryable error",
    "[peer_pool]") {
  // It may be restarting: tried again with backoff until the connect timeout after the first
  // failure (each dial bounded by a third of it); the fetch timeout is for results still being
  // computed.
  Fixture f({.connect_timeout = std::chrono::milliseconds(1200),
             .fetch_timeout = std::chrono::hours(1),
             .token = {},
             .tls = nullptr});
  std::string address;
  kj::Own<kj::ConnectionReceiver> silent;
  SECTION("nothing listens there") { address = fmt::format("127.0.0.1:{}", agentd::test::unused_port()); }
  SECTION("it accepts connections but never answers") {
    silent = f.io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(f.io.waitScope)->listen();
    address = fmt::format("127.0.0.1:{}", silent->getPort());
  }
  auto start = std::chrono::steady_clock::now();
  f.fetch(address, "origin-1", "call-x");
  f.fetch(address, "origin-1", "call-y");
  REQUIRE(f.pump_until([&] { return f.outs.size() == 2; }));
  auto took = std::chrono::steady_clock::now() - start;
  // Retried (backoff from 100 ms) rather than failing at the first refusal, and not past the
  // connect timeout by much.
  CHECK(took >= std::chrono::milliseconds(1000));
  CHECK(took < std::chrono::seconds(5));
  for (const auto& o : f.outs) {
    const Error* e = outcome_error(o);
    REQUIRE(e != nullptr);
    INFO(e->what());
    CHECK(e->retryable());
    CHECK(e->code() == ErrorCode::disconnected);
    CHECK_THAT(e->message(), Contains(address) && Contains("--peer-connect-timeout"));
  }
  // Each fetch fails naming its own call. The two give up on deadlines of their own, microseconds
  // apart, so they may finish in either order: sorted, call-x's message comes first.
  std::vector<std::string> messages{outcome_error(f.outs[0])->message(), outcome_error(f.outs[1])->message()};
  std::sort(messages.begin(), messages.end());
  CHECK_THAT(messages[0], Contains("call-x") && !Contains("call-y"));
  CHECK_THAT(messages[1], Contains("call-y") && !Contains("call-x"));
}

TEST_CASE("after a failed connection the next fetch connects afresh", "[peer_pool]") {
  // (A short fetch timeout: the first fetch keeps trying that long.)
  Fixture f({.connect_timeout = std::chrono::seconds(5),
             .fetch_timeout = std::chrono::milliseconds(800),
             .token = {},
             .tls = nullptr});
  // A port where nothing listens yet; a server comes up there later (an origin restarting).
  const std::uint16_t port = agentd::test::unused_port();
  const std::string address = fmt::format("127.0.0.1:{}", port);
  f.fetch(address, "origin-late", "call-1");
  REQUIRE(f.pump_until([&] { return f.outs.size() == 1; }));
  REQUIRE(outcome_error(f.outs[0]) != nullptr);
  CHECK(outcome_error(f.outs[0])->retryable());

  Origin late(f.io, "origin-late", port);
  late.create("EchoAgent", "a");
  late.start_call("a", "call-1", "now it is there");
  f.fetch(address, "origin-late", "call-1");
  REQUIRE(f.pump_until([&] { return f.outs.size() == 2; }));
  REQUIRE(msg_of(f.outs[1]) != nullptr);
  CHECK(msg_of(f.outs[1])->text() == "now it is there");
  f.pool.reset();  // its connection to late goes before late does
}

TEST_CASE(
    "a placeholder naming another server than the one at its origin fails at once with "
    "unknown_call naming both",
    "[peer_pool]") {
  // The server that made the call was restarted or replaced: the one at that address now has
  // never heard of the call, and would wait for it until the fetch timeout (60 s here).
  Fixture f;
  auto start = std::chrono::steady_clock::now();
  f.fetch(f.origin->address, "origin-0", "call-from-before");
  REQUIRE(f.pump_until([&] { return f.outs.size() == 1; }));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  const Error* e = outcome_error(f.outs[0]);
  REQUIRE(e != nullptr);
  INFO(e->what());
  CHECK(e->code() == ErrorCode::unknown_call);
  CHECK_FALSE(e->retryable());  // the result is gone with the server that made it
  CHECK_THAT(e->message(), Contains("origin-0") && Contains("origin-1") && Contains(f.origin->address) &&
                               Contains("call-from-before"));

  // Not cached, and the connection still serves placeholders of the server that is there.
  f.origin->create("EchoAgent", "a");
  f.origin->start_call("a", "call-here", "here");
  f.fetch(f.origin->address, "origin-1", "call-here");
  REQUIRE(f.pump_until([&] { return f.outs.size() == 2; }));
  REQUIRE(msg_of(f.outs[1]) != nullptr);
  CHECK(msg_of(f.outs[1])->text() == "here");
  f.fetch(f.origin->address, "origin-0", "call-from-before");
  REQUIRE(f.pump_until([&] { return f.outs.size() == 3; }));
  REQUIRE(outcome_error(f.outs[2]) != nullptr);
  CHECK(outcome_error(f.outs[2])->code() == ErrorCode::unknown_call);
}
