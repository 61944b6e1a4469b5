// Client::local (libagentd/src/local/local_mode): a Server in this process behind the same client
// API, no sockets. The agents run in this process, on the server's worker threads.
#include "error_of.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <string>
#include <vector>

using namespace agentd;
using agentd::test::error_of;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// Answers with the process it runs in and prefix + the input.
class WhereAgent : public Agent {
 public:
  explicit WhereAgent(AgentInit init) : Agent(std::move(init)) {
    register_method("pid", [](const Value&) { return Value(static_cast<std::int64_t>(::getpid())); });
  }
  Msg reply(const Msg& x) override {
    memory().add(x);
    return Msg(name(), args().value("prefix", std::string{}) + x.text());
  }
};

LocalOptions local_mode_options() {
  LocalOptions o;
  o.classes = {agent_class<WhereAgent>("WhereAgent")};
  o.max_workers = 4;
  return o;
}

}  // namespace

TEST_CASE("local mode runs the agents in this process, behind the client API", "[local]") {
  auto client = Client::local(local_mode_options());
  CHECK(client.address() == "local");
  CHECK(client.port() == 0);
  CHECK_THAT(client.server_id(), StartsWith("local-"));
  auto info = client.info();
  CHECK(info.server_id == client.server_id());
  CHECK(info.pid == ::getpid());
  CHECK(info.classes == std::vector<std::string>{"WhereAgent"});

  auto a = client.create_agent("WhereAgent", "A", Value{{"prefix", "a:"}});
  CHECK(a.call("pid") == Value(static_cast<std::int64_t>(::getpid())));
  CHECK(a.reply(Msg("user", "hi", "user")).get().text() == "a:hi");
  // Placeholders made here name no server address: they stay in this process.
  CHECK(a.reply(Msg("user", "x", "user")).origin() == "local");
}

TEST_CASE("local mode passes a placeholder from one agent to another before it is ready", "[local]") {
  auto client = Client::local(local_mode_options());
  auto a = client.create_agent("WhereAgent", "A", Value{{"prefix", "a:"}});
  auto b = client.create_agent("WhereAgent", "B", Value{{"prefix", "b:"}});
  Placeholder p = a.reply(Msg("user", "x", "user"));
  Placeholder q = b.reply(p);
  Placeholder r = a.reply(q);
  CHECK(r.get().text() == "a:b:a:x");
  CHECK(q.get().text() == "b:a:x");
  // B's memory holds the message A made, under A's name.
  auto memory = b.memory();
  REQUIRE(memory.size() == 1);
  CHECK(memory[0].name == "A");
  CHECK(memory[0].text() == "a:x");
}

TEST_CASE("local mode deletes agents: their ids are unknown afterwards", "[local]") {
  auto client = Client::local(local_mode_options());
  auto a = client.create_agent("WhereAgent", "A", Value::object(), "a-id");
  auto b = client.create_agent("WhereAgent", "B");
  client.delete_agent("a-id");
  CHECK(error_of([&] { client.agent("a-id"); }).code() == ErrorCode::unknown_agent);
  Error e = error_of([&] { a.reply(Msg("user", "x", "user")).get(); });
  CHECK(e.code() == ErrorCode::unknown_agent);
  CHECK(e.agent_id() == "a-id");
  auto left = client.list_agents();
  REQUIRE(left.size() == 1);
  CHECK(left[0].id == b.id());
  // The id is free again.
  CHECK(client.create_agent("WhereAgent", "A2", Value::object(), "a-id").id() == "a-id");
}

TEST_CASE("local mode reports a plugin that cannot be loaded as plugin_error", "[local]") {
  LocalOptions o = local_mode_options();
  o.plugins = {"/nonexistent/libno_such_agent.so"};
  Error e = error_of([&] { Client::local(o); });
  CHECK(e.code() == ErrorCode::plugin_error);
  CHECK_THAT(e.message(), Contains("libno_such_agent.so"));
}

TEST_CASE("local clients are independent: each has its own server and agents", "[local]") {
  auto one = Client::local(local_mode_options());
  auto two = Client::local(local_mode_options());
  CHECK(one.server_id() != two.server_id());
  one.create_agent("WhereAgent", "A", Value::object(), "same-id");
  two.create_agent("WhereAgent", "A", Value::object(), "same-id");
  CHECK(one.list_agents().size() == 1);
  two.delete_agent("same-id");
  CHECK(one.list_agents().size() == 1);
  CHECK(two.list_agents().empty());
}
