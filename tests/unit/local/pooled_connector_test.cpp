// The pooled agent connector (libagentd/src/local/pooled_connector) as local mode gives it to its
// Server: agent code reaches another agent of the same server with connect_agent(), over a core
// attached to the server's loop and its own bootstrap capability (no socket).
#include "error_of.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <string>

using namespace agentd;
using agentd::test::error_of;
using Catch::Matchers::Contains;

namespace {

class EchoAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    memory().add(x);
    return Msg(name(), "echo " + x.text());
  }
};

// Passes each message on to the agent its args name ("target": an agent reference) and answers
// with that agent's reply; "observe" tells the target, then reads the target's memory size.
class RelayAgent : public Agent {
 public:
  explicit RelayAgent(AgentInit init) : Agent(std::move(init)) {
    register_method("observe_and_count", [this](const Value& a) {
      AgentRef target = connect_agent(*this, args().at("target"));
      target.observe(Msg(name(), a.at("text").get<std::string>(), "user"));
      return Value(static_cast<std::int64_t>(target.memory().size()));
    });
  }
  Msg reply(const Msg& x) override {
    AgentRef target = connect_agent(*this, args().at("target"));
    return Msg(name(), "relayed " + target.reply(x).get().text());
  }
};

LocalOptions pooled_options() {
  LocalOptions o;
  o.classes = {agent_class<EchoAgent>("EchoAgent"), agent_class<RelayAgent>("RelayAgent")};
  o.max_workers = 8;
  return o;
}

// A reference to agent a of the local server for agent code. AgentRef::to_value() of a local
// client names the address "local", which connect_agent refuses (bad_args); the connector finds
// the server by its id, so the reference carries the server id and any well-formed address.
Value ref_in_server(const AgentRef& a) {
  Value ref = a.to_value();
  ref["agentd_agent_ref"]["address"] = "127.0.0.1:1";
  return ref;
}

}  // namespace

TEST_CASE("an agent reaches another agent of its local server through the pooled connector",
          "[local][pooled_connector]") {
  auto client = Client::local(pooled_options());
  auto echo = client.create_agent("EchoAgent", "E");
  REQUIRE(echo.to_value()["agentd_agent_ref"]["server_id"] == client.server_id());
  auto relay = client.create_agent("RelayAgent", "R", Value{{"target", ref_in_server(echo)}});

  CHECK(relay.reply(Msg("user", "one", "user")).get().text() == "relayed echo one");
  // Again, over the link the first call opened, and in parallel from two relays.
  auto relay2 = client.create_agent("RelayAgent", "R2", Value{{"target", ref_in_server(echo)}});
  Placeholder p = relay.reply(Msg("user", "two", "user"));
  Placeholder q = relay2.reply(Msg("user", "three", "user"));
  CHECK(p.get().text() == "relayed echo two");
  CHECK(q.get().text() == "relayed echo three");
  CHECK(relay.call("observe_and_count", Value{{"text", "noted"}}) == Value(std::int64_t{4}));

  auto memory = echo.memory();
  REQUIRE(memory.size() == 4);
  CHECK(memory[0].text() == "one");
  CHECK(memory[3].text() == "noted");
  CHECK(memory[3].name == "R");
}

TEST_CASE(
    "an agent that names a missing agent fails its call with the server's unknown_agent, "
    "not agent_failed",
    "[local][pooled_connector]") {
  auto client = Client::local(pooled_options());
  auto echo = client.create_agent("EchoAgent", "E");
  Value ref = ref_in_server(echo);
  ref["agentd_agent_ref"]["id"] = "no-such-agent";
  auto relay = client.create_agent("RelayAgent", "R", Value{{"target", ref}});
  Error e = error_of([&] { relay.reply(Msg("user", "x", "user")).get(); });
  CHECK(e.code() == ErrorCode::unknown_agent);
  CHECK_THAT(e.message(), Contains("no agent 'no-such-agent'"));
  CHECK(e.agent_id() == relay.id());  // the relay's call failed
}

TEST_CASE("a local client closes cleanly while its agents hold links to each other",
          "[local][pooled_connector]") {
  std::string answer;
  {
    auto client = Client::local(pooled_options());
    auto echo = client.create_agent("EchoAgent", "E");
    auto relay = client.create_agent("RelayAgent", "R", Value{{"target", ref_in_server(echo)}});
    answer = relay.reply(Msg("user", "bye", "user")).get().text();
    client.close();  // detaches the link's core on the server's loop, then stops the server
  }
  CHECK(answer == "relayed echo bye");
}
