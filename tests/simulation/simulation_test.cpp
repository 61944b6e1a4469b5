// The guess-2/3-of-the-average simulation (examples/simulation) on real as_server children:
// the game played through simulation.h must count every participant's guess exactly once per
// round, sum what the participants themselves report, crown the participant closest to 2/3 of
// the average, and keep every group beside its participants; the `simulation` program must
// print its report; participants asking a model (the fake OpenAI-compatible server) must take
// the first number of its answer, clamped to [0, 100].
#include "fake_model_server.h"
#include "server_process.h"
#include "simulation.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace agentd::test;

namespace {

agentd::ChildOptions child(const std::string& model_config_path = std::string()) {
  agentd::ChildOptions o;
  o.server_path = AGENTD_AS_SERVER_PATH;
  o.plugins = {AGENTD_SIMULATION_PLUGIN};
  o.model_config_path = model_config_path;
  return o;
}

std::vector<Client> spawn(std::size_t n, const std::string& model_config_path = std::string()) {
  std::vector<std::optional<Client>> made(n);
  simulation::on_each(n, [&](std::size_t i) { made[i] = Client::spawn_child(child(model_config_path)); });
  std::vector<Client> out;
  for (auto& c : made) out.push_back(std::move(*c));
  return out;
}

std::vector<Client*> pointers(std::vector<Client>& clients) {
  std::vector<Client*> out;
  for (auto& c : clients) out.push_back(&c);
  return out;
}

// Every participant's own "state", by name.
std::map<std::string, Value> states(const simulation::Game& game) {
  std::map<std::string, Value> out;
  for (const auto& s : game.placement())
    for (const auto& p : s.participants) out[p.name()] = p.call("state");
  return out;
}

// Checks one round against what the participants say they guessed.
void check_round(const simulation::Game& game, const simulation::RoundResult& res, std::int64_t round) {
  const auto st = states(game);
  const auto n = static_cast<std::int64_t>(game.options().participants);
  REQUIRE(static_cast<std::int64_t>(st.size()) == n);
  std::int64_t sum = 0;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [name, s] : st) {
    INFO(name << " " << s.dump());
    CHECK(s["guesses"] == round);  // exactly once per round
    CHECK(s["round"] == round);
    const int g = s["last"].get<int>();
    CHECK(g >= 0);
    CHECK(g <= 100);
    sum += g;
  }
  CHECK(res.count == n);
  CHECK(res.sum == sum);
  CHECK(res.average == Approx(static_cast<double>(sum) / static_cast<double>(n)));
  CHECK(res.target == Approx(res.average * 2.0 / 3.0));
  for (const auto& [name, s] : st) best = std::min(best, std::abs(s["last"].get<int>() - res.target));
  REQUIRE(st.count(res.winner) == 1);
  CHECK(st.at(res.winner)["last"] == res.winner_guess);
  CHECK(std::abs(res.winner_guess - res.target) == Approx(best));
}

// Each server holds its share of participants and its groups, and every member of a group is an
// agent of the group's own server.
void check_placement(const simulation::Game& game, const std::vector<Client*>& servers,
                     std::size_t per_server, std::size_t groups_per_server) {
  std::size_t members_seen = 0;
  REQUIRE(game.placement().size() == servers.size());
  for (std::size_t i = 0; i < servers.size(); ++i) {
    std::set<std::string> here;
    for (const auto& a : servers[i]->list_agents()) here.insert(a.id);
    const auto& placed = game.placement()[i];
    CHECK(placed.participants.size() == per_server);
    CHECK(placed.groups.size() == groups_per_server);
    CHECK(here.size() == per_server + groups_per_server);
    std::size_t in_groups = 0;
    for (const auto& p : placed.participants) CHECK(here.count(p.id()) == 1);
    for (const auto& g : placed.groups) {
      CHECK(here.count(g.id()) == 1);
      const Value members = g.call("members");
      in_groups += members.size();
      for (const auto& m : members) {
        INFO("group " << g.name() << " member " << m.dump());
        CHECK(here.count(m["id"].get<std::string>()) == 1);
      }
    }
    CHECK(in_groups == placed.participants.size());
    members_seen += in_groups;
  }
  CHECK(members_seen == per_server * servers.size());
}

std::string run(const std::string& cmd, int& status) {
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  status = ::pclose(p);
  return out;
}

}  // namespace

TEST_CASE("simulation: 200 participants over 2 servers play 2 rounds by the rules", "[simulation]") {
  auto clients = spawn(2);
  simulation::GameOptions o;
  o.participants = 200;
  o.groups_per_server = 3;
  o.latency_ms = 10;
  o.seed = 7;
  simulation::Game game(pointers(clients), o);
  game.create_participants();
  game.create_groups();
  REQUIRE(game.group_count() == 6);

  check_placement(game, pointers(clients), 100, 3);
  std::vector<std::int64_t> sums;
  for (std::int64_t r = 1; r <= 2; ++r) {
    const auto res = game.play_round(r);
    check_round(game, res, r);
    sums.push_back(res.sum);
  }

  // The same seed, participants and servers give the same guesses; another seed others.
  auto again = spawn(2);
  simulation::Game same(pointers(again), o);
  same.create_participants();
  same.create_groups();
  CHECK(same.play_round(1).sum == sums[0]);
  o.seed = 8;
  simulation::Game other(pointers(again), o);
  other.create_participants();
  other.create_groups();
  other.play_round(1);
  const auto with_7 = states(same);
  const auto with_8 = states(other);
  int differ = 0;
  for (const auto& [name, s] : with_8) differ += s["last"] != with_7.at(name)["last"] ? 1 : 0;
  CHECK(differ > 100);  // guesses are uniform in [0, 100]: about 1 in 101 agree by chance
}

TEST_CASE("simulation: on a Cluster, participants spread by Cluster::create_agents",
          "[simulation][cluster]") {
  agentd::Cluster cluster = agentd::Cluster::spawn_children(3, child());
  simulation::GameOptions o;
  o.participants = 150;
  o.groups_per_server = 2;
  o.latency_ms = 10;
  simulation::Game game(cluster, o);
  game.create_participants();
  game.create_groups();
  std::vector<Client*> servers;
  for (std::size_t i = 0; i < cluster.size(); ++i) servers.push_back(&cluster.server(i));
  check_placement(game, servers, 50, 2);
  const auto res = game.play_round(1);
  check_round(game, res, 1);
  // Names run over the whole cluster.
  std::set<std::string> names;
  for (const auto& s : game.placement())
    for (const auto& p : s.participants) names.insert(p.name());
  CHECK(names.size() == 150);
  CHECK(names.count("p0") == 1);
  CHECK(names.count("p149") == 1);
}

TEST_CASE("simulation: the program prints init, rounds, average, target and winner", "[simulation]") {
  int status = 0;
  const std::string out =
      run(std::string("AGENTD_AS_SERVER=") + AGENTD_AS_SERVER_PATH + " " + AGENTD_SIMULATION_BINARY +
              " --participants 200 --servers 2 --latency-ms 10 --rounds 2 --groups-per-server 2"
              " 2>&1",
          status);
  INFO(out);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(out, Contains("servers: 2 (children)"));
  CHECK_THAT(out, Contains("init: ") && Contains("200 participants in") && Contains("4 groups in"));
  CHECK_THAT(out, Contains("round 1: ") && Contains("round 2: "));
  CHECK_THAT(out, Contains("guesses: 200, average: ") && Contains("target (2/3 of it): "));
  CHECK_THAT(out, Contains("winner: p"));

  const std::string help = run(std::string(AGENTD_SIMULATION_BINARY) + " --help", status);
  CHECK(WEXITSTATUS(status) == 0);
  for (const char* flag : {"--participants", "--servers", "--cluster", "--groups-per-server", "--latency-ms",
                           "--rounds", "--model", "--model-config-path", "--seed"})
    CHECK_THAT(help, Contains(flag));
  run(std::string(AGENTD_SIMULATION_BINARY) + " --participants zero 2>/dev/null", status);
  CHECK(WEXITSTATUS(status) == 2);
}

TEST_CASE("simulation: participants ask a model and take the first number of its answer",
          "[simulation][models]") {
  const std::string key = unique_key("simulation");
  TempDir dir;
  const std::string config =
      dir.write("models.yaml", fake_model_server().openai_config("guesser", key, "ok"));
  auto clients = spawn(2, config);
  simulation::GameOptions o;
  o.participants = 30;
  o.groups_per_server = 2;
  o.latency_ms = 5;
  o.model = "guesser";
  // The fake server answers "echo: <the question>": the first number there is the guess.
  o.prompt = "Your guess? I would say 42, then 7.";
  simulation::Game game(pointers(clients), o);
  game.create_participants();
  game.create_groups();
  auto res = game.play_round(1);
  check_round(game, res, 1);
  CHECK(res.sum == 30 * 42);
  CHECK(res.winner_guess == 42);
  CHECK(fake_model_server().requests(key).size() == 30);
  for (const auto& [name, s] : states(game)) CHECK(s["model_fallbacks"] == 0);

  // A number out of range is clamped; an answer without one falls back to the random guess.
  o.prompt = "I say 250.";
  simulation::Game high(pointers(clients), o);
  high.create_participants();
  high.create_groups();
  CHECK(high.play_round(1).sum == 30 * 100);
  o.prompt = "no number at all";
  simulation::Game none(pointers(clients), o);
  none.create_participants();
  none.create_groups();
  res = none.play_round(1);
  check_round(none, res, 1);
  for (const auto& [name, s] : states(none)) CHECK(s["model_fallbacks"] == 1);
}
