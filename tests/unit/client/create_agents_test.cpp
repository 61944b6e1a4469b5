// Client::create_agent and Client::create_agents (libagentd/src/client/create_agents): many agents
// in a few messages, all or nothing, against agents in this process (Client::local).
#include "error_of.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <stdexcept>
#include <string>

using namespace agentd;
using agentd::test::error_of;
using Catch::Matchers::Contains;

namespace {

std::atomic<int> g_constructed{0};  // PickyAgent constructions since the test reset it
std::atomic<int> g_fail_at{-1};     // the construction (0, 1, ...) that throws; -1: none

class PickyAgent : public Agent {
 public:
  explicit PickyAgent(AgentInit init) : Agent(std::move(init)) {
    if (g_constructed.fetch_add(1) == g_fail_at.load()) throw std::runtime_error("picky constructor refused");
  }
  Msg reply(const Msg& x) override { return Msg(name(), x.text()); }
};

LocalOptions creation_options() {
  LocalOptions o;
  o.classes = {agent_class<PickyAgent>("PickyAgent")};
  o.max_workers = 4;
  return o;
}

}  // namespace

TEST_CASE("create_agents makes count agents named prefix + index, each usable", "[client][create]") {
  g_constructed = 0;
  g_fail_at = -1;
  auto client = Client::local(creation_options());
  auto agents = client.create_agents("PickyAgent", 5, Value::object(), "w", 10);
  REQUIRE(agents.size() == 5);
  std::set<std::string> ids;
  for (std::size_t i = 0; i < agents.size(); ++i) {
    CHECK(agents[i].name() == "w" + std::to_string(10 + i));
    CHECK(agents[i].class_name() == "PickyAgent");
    ids.insert(agents[i].id());
    CHECK(agents[i].reply(Msg("user", "hi", "user")).get().name == agents[i].name());
  }
  CHECK(ids.size() == 5);
  CHECK(client.list_agents().size() == 5);
  CHECK(g_constructed == 5);

  // Without a prefix the names are the ids.
  auto unnamed = client.create_agents("PickyAgent", 2);
  for (const auto& a : unnamed) CHECK(a.name() == a.id());
  CHECK(client.create_agents("PickyAgent", 0).empty());
}

TEST_CASE(
    "create_agents is all or nothing: one failing constructor deletes the agents made and "
    "throws its error",
    "[client][create]") {
  g_constructed = 0;
  g_fail_at = 3;
  auto client = Client::local(creation_options());
  Error e = error_of([&] { client.create_agents("PickyAgent", 8, Value::object(), "p"); });
  CHECK_THAT(e.message(), Contains("picky constructor refused"));
  CHECK_THAT(e.message(), Contains("creating 8 PickyAgent agents"));
  CHECK_THAT(e.message(), Contains("7 were made and deleted again"));
  CHECK(g_constructed == 8);
  CHECK(client.list_agents().empty());

  // The class still works once its constructor does.
  g_fail_at = -1;
  CHECK(client.create_agents("PickyAgent", 3).size() == 3);
  CHECK(client.list_agents().size() == 3);
}

TEST_CASE("create_agent of an unknown class throws unknown_class and makes nothing", "[client][create]") {
  auto client = Client::local(creation_options());
  Error e = error_of([&] { client.create_agent("NoSuchAgent", "n"); });
  CHECK(e.code() == ErrorCode::unknown_class);
  CHECK_THAT(e.message(), Contains("NoSuchAgent"));
  e = error_of([&] { client.create_agents("NoSuchAgent", 4); });
  CHECK(e.code() == ErrorCode::unknown_class);
  CHECK(client.list_agents().empty());
}
