// Property: a random orchestration program (a random DAG of calls over agents spread over up to
// three servers, placeholders passed along) computes exactly the same outputs and agent
// memories in local, child and independent mode.
#include <agentd/agentd.h>

#include <catch2/catch.hpp>
#include <server_process.h>

#include <sys/stat.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace agentd;
using agentd::test::ServerProcess;

namespace {

struct Step {
  int agent;
  bool observe;
  int input;  // -1: a fresh message, else the index of an earlier step's placeholder
};

std::vector<Step> random_program(unsigned seed, int agents, int steps) {
  std::mt19937 gen(seed);
  std::vector<Step> prog;
  std::vector<int> replies;  // steps that produced a placeholder
  for (int i = 0; i < steps; ++i) {
    Step s;
    s.agent = std::uniform_int_distribution<int>(0, agents - 1)(gen);
    s.observe = std::uniform_int_distribution<int>(0, 9)(gen) == 0;
    bool fresh = replies.empty() || std::uniform_int_distribution<int>(0, 3)(gen) == 0;
    s.input = fresh ? -1 : replies[std::uniform_int_distribution<std::size_t>(0, replies.size() - 1)(gen)];
    if (!s.observe) replies.push_back(i);
    prog.push_back(s);
  }
  return prog;
}

// What a run computes, as text: every reply's content, then every agent's memory.
std::string run_program(const std::vector<Step>& prog, std::vector<Client*> clients, int agents) {
  std::vector<AgentRef> refs;
  for (int i = 0; i < agents; ++i)
    refs.push_back(clients[i % clients.size()]->create_agent("TrailAgent", "ag" + std::to_string(i)));
  std::vector<std::unique_ptr<Placeholder>> out(prog.size());
  for (std::size_t i = 0; i < prog.size(); ++i) {
    const Step& s = prog[i];
    AgentRef& a = refs[s.agent];
    if (s.input < 0) {
      Msg m("user", "m" + std::to_string(i), "user");
      if (s.observe)
        a.observe(m);
      else
        out[i] = std::make_unique<Placeholder>(a.reply(m));
    } else {
      const Placeholder& in = *out[s.input];
      if (s.observe)
        a.observe(in);
      else
        out[i] = std::make_unique<Placeholder>(a.reply(in));
    }
  }
  std::string text;
  for (std::size_t i = 0; i < prog.size(); ++i)
    if (out[i]) text += std::to_string(i) + "=" + out[i]->get().text() + "\n";
  for (auto& r : refs) {
    text += r.name() + ":";
    for (const auto& m : r.memory()) text += " [" + m.name + "|" + m.role + "|" + m.content.dump() + "]";
    text += "\n";
  }
  for (auto* c : clients) c->delete_all_agents();
  return text;
}

}  // namespace

TEST_CASE("random programs compute the same in local, child and independent mode", "[flow][property]") {
  const int agents = 7;
  auto local = Client::local({.plugins = {agentd::test::echo_plugin()}});

  // Children require a token; the independent servers log in to them with it (mixed below).
  const std::string child_token = "property-test-child-token-0123456789";
  agentd::test::TempDir dir;
  const std::string peer_token = dir.write("peer-token", child_token + "\n");
  REQUIRE(::chmod(peer_token.c_str(), 0600) == 0);
  ChildOptions child_opts;
  child_opts.plugins = {agentd::test::echo_plugin()};
  child_opts.server_path = agentd::test::as_server_path();
  child_opts.client.token = child_token;
  std::vector<Client> children;
  for (int i = 0; i < 3; ++i) children.push_back(Client::spawn_child(child_opts));

  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<Client> independents;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(ServerProcess::start(agentd::test::standard_args({"--peer-token-file", peer_token})));
    independents.push_back(servers.back()->connect());
  }

  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    auto prog = random_program(seed, agents, 60);
    std::string expected = run_program(prog, {&local}, agents);
    INFO("seed " << seed);
    CHECK(run_program(prog, {&children[0], &children[1], &children[2]}, agents) == expected);
    CHECK(run_program(prog, {&independents[0], &independents[1], &independents[2]}, agents) == expected);
    // Two servers, and every agent alone on its server, change nothing either.
    CHECK(run_program(prog, {&independents[0], &children[1]}, agents) == expected);
  }
}
