// agentd::Cluster against real as_server processes: placement by each policy and on a named
// server, members down at creation time, refs and placeholders mixing across servers, cluster
// files and address lists, DNS names, and child servers. (DNS names resolving to several
// addresses are tested through agentctl, under nss_wrapper: tests/agentctl.)
#include "endpoint.h"
#include "server_process.h"
#include "test_names.h"

#include <agentd/cluster.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace agentd::test;
using agentd::ChildOptions;
using agentd::Cluster;
using agentd::ClusterOptions;
using agentd::Placement;
namespace detail = agentd::detail;
namespace net = agentd::net;

namespace {

struct Servers {
  std::vector<std::unique_ptr<ServerProcess>> procs;
  std::vector<std::string> addresses;
  explicit Servers(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      procs.push_back(ServerProcess::start(standard_args()));
      addresses.push_back(fmt::format("127.0.0.1:{}", procs.back()->port()));
    }
  }
  std::uint64_t agents_on(std::size_t i) { return procs[i]->connect().info().agent_count; }
};

std::string address_of(const AgentRef& ref) {
  return ref.to_value()["agentd_agent_ref"]["address"].get<std::string>();
}

}  // namespace

TEST_CASE("round_robin places agents on the servers in member order", "[cluster]") {
  Servers s(3);
  auto cluster = Cluster::connect(s.addresses);
  REQUIRE(cluster.size() == 3);
  std::vector<std::string> placed;
  for (int i = 0; i < 6; ++i) placed.push_back(address_of(cluster.create_agent("EchoAgent")));
  for (std::size_t i = 0; i < 6; ++i) CHECK(placed[i] == s.addresses[i % 3]);
  for (std::size_t i = 0; i < 3; ++i) CHECK(s.agents_on(i) == 2);
  // Bulk creation spreads equal shares, names numbered over the whole cluster.
  auto refs = cluster.create_agents("EchoAgent", 30, Value::object(), "p");
  REQUIRE(refs.size() == 30);
  std::set<std::string> names;
  for (std::size_t i = 0; i < refs.size(); ++i) {
    CHECK(refs[i].name() == fmt::format("p{}", i));
    names.insert(refs[i].name());
  }
  CHECK(names.size() == 30);
  for (std::size_t i = 0; i < 3; ++i) CHECK(s.agents_on(i) == 12);
  // Every agent answers, whichever server holds it.
  for (auto& r : refs) CHECK(r.reply(Msg("user", r.name())).get().text() == r.name());
  CHECK(cluster.delete_all_agents() == 36);
}

TEST_CASE("least_loaded fills the emptiest server first, one at a time and in bulk", "[cluster]") {
  Servers s(3);
  {
    auto c0 = s.procs[0]->connect();
    c0.create_agents("EchoAgent", 3);
    s.procs[1]->connect().create_agent("EchoAgent");
  }
  ClusterOptions options;
  options.placement = Placement::least_loaded;
  auto cluster = Cluster::connect(s.addresses, options);
  // (3, 1, 0): the empty server, then ties go to the first member.
  CHECK(address_of(cluster.create_agent("EchoAgent")) == s.addresses[2]);
  CHECK(address_of(cluster.create_agent("EchoAgent")) == s.addresses[1]);
  CHECK(address_of(cluster.create_agent("EchoAgent")) == s.addresses[2]);
  CHECK(s.agents_on(0) == 3);
  CHECK(s.agents_on(1) == 2);
  CHECK(s.agents_on(2) == 2);
  // 11 more in bulk: (3, 2, 2) + 11 = 18, six each.
  auto refs = cluster.create_agents("EchoAgent", 11);
  CHECK(refs.size() == 11);
  for (std::size_t i = 0; i < 3; ++i) CHECK(s.agents_on(i) == 6);
}

TEST_CASE("an agent is created on a named server by address or index", "[cluster]") {
  Servers s(2);
  auto cluster = Cluster::connect(s.addresses);
  CHECK(address_of(cluster.create_agent_on(s.addresses[1], "EchoAgent", "b")) == s.addresses[1]);
  CHECK(address_of(cluster.create_agent_on("0", "EchoAgent", "a")) == s.addresses[0]);
  auto e = error_of([&] { cluster.create_agent_on("127.0.0.1:1", "EchoAgent"); });
  CHECK(e.code() == ErrorCode::bad_args);
  CHECK_THAT(e.message(), Catch::Contains(s.addresses[0]) && Catch::Contains(s.addresses[1]));
  // Errors from the server come through unchanged.
  CHECK(error_of([&] { cluster.create_agent_on("1", "NoSuchAgent"); }).code() == ErrorCode::unknown_class);
  // And the agent is found by id wherever it is.
  auto b = cluster.agent(cluster.create_agent_on("1", "EchoAgent").id());
  CHECK(address_of(b) == s.addresses[1]);
  CHECK(error_of([&] { cluster.agent("no-such-id"); }).code() == ErrorCode::unknown_agent);
}

TEST_CASE("a server down at creation time is skipped and reported", "[cluster]") {
  Servers s(3);
  auto cluster = Cluster::connect(s.addresses);
  s.procs[1]->kill_now();
  std::map<std::string, int> placed;
  for (int i = 0; i < 4; ++i) ++placed[address_of(cluster.create_agent("EchoAgent"))];
  CHECK(placed.size() == 2);
  CHECK(placed.count(s.addresses[1]) == 0);
  auto members = cluster.members();
  REQUIRE(members.size() == 3);
  CHECK(members[0].up);
  CHECK_FALSE(members[1].up);
  CHECK_FALSE(members[1].error.empty());
  CHECK(members[2].up);
  CHECK_FALSE(cluster.info(1).has_value());
  CHECK(error_of([&] { cluster.server(1); }).code() == ErrorCode::disconnected);
  CHECK(error_of([&] { cluster.create_agent_on("1", "EchoAgent"); }).code() == ErrorCode::disconnected);

  // Bulk creation when a member dies before its share is made: the share goes to the others.
  s.procs[2]->kill_now();
  auto refs = cluster.create_agents("EchoAgent", 20, Value::object(), "q");
  REQUIRE(refs.size() == 20);
  for (std::size_t i = 0; i < refs.size(); ++i) {
    CHECK(refs[i].name() == fmt::format("q{}", i));
    CHECK(address_of(refs[i]) == s.addresses[0]);
  }
  CHECK(s.agents_on(0) == 22);

  // With no server left, a clear retryable error naming each member.
  s.procs[0]->kill_now();
  auto e = error_of([&] { cluster.create_agent("EchoAgent"); });
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Catch::Contains(s.addresses[1]) && Catch::Contains("no server"));
}

TEST_CASE("a member that cannot be reached at start is down, and joins on refresh", "[cluster]") {
  Servers s(1);
  auto port = unused_port();
  auto missing = fmt::format("127.0.0.1:{}", port);
  auto cluster = Cluster::connect({s.addresses[0], missing});
  auto members = cluster.members();
  REQUIRE(members.size() == 2);
  CHECK(members[0].up);
  CHECK_FALSE(members[1].up);
  CHECK(cluster.refresh() == 1);
  auto late = ServerProcess::start(
      {"--port", std::to_string(port), "--plugin", echo_plugin(), "--log-level", "warn"});
  CHECK(cluster.refresh() == 2);
  CHECK(address_of(cluster.create_agent_on(missing, "EchoAgent")) == missing);

  auto none = error_of([&] { Cluster::connect({fmt::format("127.0.0.1:{}", unused_port())}); });
  CHECK(none.code() == ErrorCode::disconnected);
}

TEST_CASE("refs and placeholders from different servers mix in one program", "[cluster]") {
  Servers s(2);
  auto cluster = Cluster::connect(s.addresses);
  auto a = cluster.create_agent_on("0", "EchoAgent", "a", Value{{"prefix", "a:"}});
  auto b = cluster.create_agent_on("1", "EchoAgent", "b", Value{{"prefix", "b:"}});
  // A chain through both servers: each consumer's server fetches its input from the origin.
  Placeholder p = a.reply(Msg("user", "x"));
  for (int i = 0; i < 5; ++i) p = (i % 2 == 0 ? b : a).reply(p);
  CHECK(p.get().text() == "b:a:b:a:b:a:x");
  // An agent on one server calls an agent on the other through its ref.
  auto relay = cluster.create_agent_on("0", "RelayAgent", "r", Value{{"target", b.to_value()}});
  CHECK(relay.reply(Msg("user", "y")).get().text() == "relayed: b:y");
}

TEST_CASE("cluster files and address lists name the members", "[cluster]") {
  Servers s(2);
  TempDir dir;
  auto file = dir.write("cluster.yaml", fmt::format(R"(# two servers, two spellings
servers:
  - {}
  - {{host: 127.0.0.1, port: {}}}
placement: least_loaded
)",
                                                    s.addresses[0], s.procs[1]->port()));
  auto cluster = Cluster::open(file);
  REQUIRE(cluster.size() == 2);
  CHECK(cluster.members()[1].address == s.addresses[1]);
  s.procs[0]->connect().create_agent("EchoAgent");
  // least_loaded from the file: the empty second server gets it.
  CHECK(address_of(cluster.create_agent("EchoAgent")) == s.addresses[1]);

  auto listed = Cluster::open(s.addresses[0] + "," + s.addresses[1]);
  CHECK(listed.size() == 2);
  // dns:NAME:PORT resolves the name: localhost is 127.0.0.1 here.
  auto by_name = Cluster::open("dns:localhost:" + std::to_string(s.procs[0]->port()));
  REQUIRE(by_name.size() >= 1);
  CHECK(by_name.members()[0].source == "dns:localhost:" + std::to_string(s.procs[0]->port()));

  auto bad = [&](const std::string& text) {
    auto path = dir.write("bad.yaml", text);
    auto e = error_of([&] { Cluster::from_file(path); });
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Catch::Contains(path));
    return e.message();
  };
  CHECK_THAT(bad("servers: []\n"), Catch::Contains("at least one"));
  CHECK_THAT(bad("servers: [127.0.0.1:1]\nplacment: x\n"), Catch::Contains("placment"));
  CHECK_THAT(bad("servers: [nonsense]\n"), Catch::Contains("servers[0]"));
  CHECK_THAT(bad("servers: [127.0.0.1:1]\nplacement: random\n"), Catch::Contains("random"));
  CHECK_THAT(bad("servers: [127.0.0.1:1\n"), Catch::Contains("YAML"));
  auto missing = error_of([&] { Cluster::open(dir.path() + "/none.yaml"); });
  CHECK(missing.code() == ErrorCode::config_error);
  CHECK(error_of([&] { Cluster::open("dns:no-such-host.invalid:1"); }).code() == ErrorCode::bad_args);
}

TEST_CASE("spawn_children starts servers that stop with the cluster", "[cluster]") {
  std::vector<std::string> addresses;
  {
    ChildOptions child;
    child.server_path = as_server_path();
    child.plugins = {echo_plugin()};
    auto cluster = Cluster::spawn_children(2, child);
    REQUIRE(cluster.size() == 2);
    for (const auto& m : cluster.members()) {
      CHECK(m.up);
      CHECK(m.source == "child");
      addresses.push_back(m.address);
    }
    CHECK(addresses[0] != addresses[1]);
    auto refs = cluster.create_agents("EchoAgent", 10);
    std::map<std::string, int> per;
    for (auto& r : refs) ++per[address_of(r)];
    CHECK(per.size() == 2);
    CHECK(per[addresses[0]] == 5);
    CHECK(cluster.info(0)->agent_count == 5);
  }
  // The children have stopped with the cluster.
  for (const auto& a : addresses) {
    auto endpoint = net::Endpoint::try_parse(a);
    REQUIRE(endpoint);
    CHECK(wait_until([&] { return !can_connect(endpoint->port); }, 10s));
  }
}
