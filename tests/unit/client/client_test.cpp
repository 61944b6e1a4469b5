// agentd::Client (libagentd/src/client/client, client_core): the requests answered by the server
// as a whole, the client's own stats, and what close() leaves behind, with the agents in this
// process (Client::local).
#include "error_of.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <set>
#include <string>
#include <vector>

using namespace agentd;
using agentd::test::error_of;
using Catch::Matchers::Contains;

namespace {

class EchoAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override { return Msg(name(), x.text()); }
};

// A client whose waits give up after a few seconds: a wait that is never answered fails the
// test with timeout instead of holding it for the default half hour.
LocalOptions client_options() {
  LocalOptions o;
  o.classes = {agent_class<EchoAgent>("EchoAgent")};
  o.max_workers = 4;
  o.client.timeout = std::chrono::seconds(5);
  return o;
}

void check_closed(const Error& e) {
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK_THAT(e.message(), Contains("the client is closed"));
}

}  // namespace

TEST_CASE("server-wide requests: info, list, delete, delete all, ping, traces", "[client]") {
  auto client = Client::local(client_options());
  client.ping();
  auto a = client.create_agent("EchoAgent", "A");
  auto b = client.create_agent("EchoAgent", "B", Value::object(), "b-id");
  CHECK(b.id() == "b-id");
  CHECK(a.reply(Msg("user", "t", "user")).get().text() == "t");

  auto info = client.info();
  CHECK(info.server_id == client.server_id());
  CHECK(info.agent_count == 2);
  CHECK(info.classes == std::vector<std::string>{"EchoAgent"});

  auto agents = client.list_agents();
  REQUIRE(agents.size() == 2);
  std::set<std::string> names{agents[0].name, agents[1].name};
  CHECK(names == std::set<std::string>{"A", "B"});

  // A duplicate id is refused.
  CHECK(error_of([&] { client.create_agent("EchoAgent", "B2", Value::object(), "b-id"); }).code() ==
        ErrorCode::duplicate_agent);

  auto spans = client.traces();
  REQUIRE_FALSE(spans.empty());
  CHECK(spans.back().agent_id == a.id());
  CHECK(spans.back().kind == "reply");
  CHECK(spans.back().outcome == "ok");

  client.delete_agent(b.id());
  CHECK(error_of([&] { client.agent(b.id()); }).code() == ErrorCode::unknown_agent);
  CHECK(error_of([&] { client.delete_agent(b.id()); }).code() == ErrorCode::unknown_agent);
  CHECK(client.delete_all_agents() == 1);
  CHECK(client.list_agents().empty());
}

TEST_CASE("stats() counts the requests and waits this client made", "[client]") {
  auto client = Client::local(client_options());
  auto before = client.stats();
  auto a = client.create_agent("EchoAgent", "A");  // one request, waited for
  auto created = client.stats();
  CHECK(created.requests == before.requests + 1);
  CHECK(created.waits == before.waits + 1);
  Placeholder p = a.reply(Msg("user", "x", "user"));  // one request, not waited for
  auto replied = client.stats();
  CHECK(replied.requests == created.requests + 1);
  CHECK(replied.waits == created.waits);
  p.get();  // a wait
  CHECK(client.stats().waits == replied.waits + 1);
  // Local mode has no connection: nothing is counted as sent or received.
  CHECK(client.stats().bytes_sent == 0);
  CHECK(client.stats().bytes_received == 0);
}

TEST_CASE(
    "after close() the client's requests and its AgentRefs' calls fail at once with "
    "disconnected, and results got before stay readable",
    "[client]") {
  auto client = Client::local(client_options());
  auto a = client.create_agent("EchoAgent", "A");
  Placeholder done = a.reply(Msg("user", "before", "user"));
  CHECK(done.get().text() == "before");

  client.close();
  client.close();  // idempotent

  auto started = std::chrono::steady_clock::now();
  check_closed(error_of([&] { client.ping(); }));
  check_closed(error_of([&] { client.list_agents(); }));
  check_closed(error_of([&] { client.create_agent("EchoAgent", "B"); }));
  check_closed(error_of([&] { client.create_agents("EchoAgent", 3); }));
  check_closed(error_of([&] { a.call("anything"); }));
  check_closed(error_of([&] { a.observe(Msg("user", "x", "user")); }));
  check_closed(error_of([&] { a.memory(); }));
  check_closed(error_of([&] { a.info(); }));
  check_closed(error_of([&] { done.on_chunk([](std::string_view) {}); }));
  // None of them waited for the client's timeout.
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(4));

  CHECK(done.get().text() == "before");
}

// Waits that need the closed client's loop thread fail at once (ClientCore::post says the work
// was dropped) instead of waiting out the client's whole timeout (30 minutes by default).
TEST_CASE(
    "after close(), stats() and a new reply's get() fail at once instead of waiting for "
    "the client's timeout",
    "[client][closed]") {
  auto client = Client::local(client_options());
  auto a = client.create_agent("EchoAgent", "A");
  client.close();

  SECTION("stats()") {
    auto started = std::chrono::steady_clock::now();
    try {
      client.stats();
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::disconnected);
    }
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(4));
  }
  SECTION("get() of a reply made after close()") {
    auto started = std::chrono::steady_clock::now();
    Placeholder p = a.reply(Msg("user", "after", "user"));
    check_closed(error_of([&] { p.get(); }));
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(4));
  }
}
