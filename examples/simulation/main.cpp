// simulation: the guess-2/3-of-the-average game of AgentScope's "Very Large-Scale Multi-Agent
// Simulation", with participants and groups spread over several as_servers. See --help.
//
// main() is the wiring: options -> servers (children it starts, or a cluster given) -> agents
// (simulation.h: participants, then groups beside them) -> rounds -> what it prints.
#include "simulation.h"

#include <agentd/agentd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr const char* kHelp = R"(Usage: simulation [options]

The guess-2/3-of-the-average game (AgentScope's "Very Large-Scale Multi-Agent Simulation"):
every participant guesses an integer in [0, 100]; the one closest to 2/3 of the average wins.
Participants are ParticipantAgents (libsimulation_agents.so) spread evenly over the servers;
each server also holds GroupAgents, each owning a slice of that server's participants. A round:
this program calls every group at once, each group calls all its participants at once (two
levels of fan-out, all through placeholders, the second never leaving its server), sums the
guesses, computes 2/3 of the average, then asks every group for its participant closest to it
and picks the winner.

Options:
  --participants N        participants in all (default 1000)
  --servers M             start M as_server children on this machine (default 4)
  --cluster SPEC          use running servers instead (agentd::Cluster::open): a list
                          "host:port,host:port", "dns:NAME:PORT", or a cluster file; the servers
                          need the simulation_agents plugin
  --groups-per-server G   groups on each server (default: one per 5000 participants of that
                          server, at least one)
  --latency-ms MS         each participant's simulated model latency before it guesses
                          (default 1000, as in the paper's runs)
  --rounds R              rounds to play (default 1)
  --seed S                seed of the participants' random guesses (default 0): the same seed,
                          participants and servers give the same game
  --model CONFIG          participants ask this model config for their guess (after the latency;
                          the first number of the answer, clamped to [0, 100]) instead of guessing
                          at random
  --model-config-path F   the model config YAML for the children this program starts
  --prompt TEXT           with --model: the question put to the model
  --plugin-dir DIR        where libsimulation_agents.so is, for the children (default: the build's)
  -h, --help              this help

Prints the time to create all agents (init), and for each round its time, the average of the
guesses, the target (2/3 of it) and the winner.
)";

struct Options {
  simulation::GameOptions game;
  std::size_t servers = 4;
  std::string cluster;
  std::int64_t rounds = 1;
  std::string model_config_path;
  std::string plugin_dir = AGENTD_SIMULATION_PLUGIN_DIR;
};

[[noreturn]] void bad(const std::string& what) {
  std::cerr << "simulation: " << what << " (see simulation --help)\n";
  std::exit(2);
}

std::int64_t number(const std::string& flag, const std::string& text, std::int64_t min) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size() || v < min) throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    bad(flag + " " + text + ": expected an integer >= " + std::to_string(min));
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::cout << kHelp;
      std::exit(0);
    }
    if (i + 1 >= argc) bad(flag + ": unknown option or missing value");
    const std::string v = argv[++i];
    if (flag == "--participants")
      o.game.participants = number(flag, v, 1);
    else if (flag == "--servers")
      o.servers = number(flag, v, 1);
    else if (flag == "--cluster")
      o.cluster = v;
    else if (flag == "--groups-per-server")
      o.game.groups_per_server = number(flag, v, 1);
    else if (flag == "--latency-ms")
      o.game.latency_ms = static_cast<int>(number(flag, v, 0));
    else if (flag == "--rounds")
      o.rounds = number(flag, v, 1);
    else if (flag == "--seed")
      o.game.seed = number(flag, v, 0);
    else if (flag == "--model")
      o.game.model = v;
    else if (flag == "--model-config-path")
      o.model_config_path = v;
    else if (flag == "--prompt")
      o.game.prompt = v;
    else if (flag == "--plugin-dir")
      o.plugin_dir = v;
    else
      bad("unknown option " + flag);
  }
  return o;
}

// The servers: M children started in parallel, or the --cluster servers.
agentd::Cluster open_servers(const Options& o) {
  if (!o.cluster.empty()) return agentd::Cluster::open(o.cluster);
  agentd::ChildOptions child;
  child.plugins = {o.plugin_dir + "/libsimulation_agents.so"};
  child.model_config_path = o.model_config_path;
  return agentd::Cluster::spawn_children(o.servers, child);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    const auto t_start = std::chrono::steady_clock::now();
    agentd::Cluster cluster = open_servers(o);
    simulation::Game game(cluster, o.game);
    std::printf("servers: %zu (%s)\n", game.servers(), o.cluster.empty() ? "children" : "cluster");
    std::printf("start servers: %.3f s\n", seconds_since(t_start));
    std::fflush(stdout);
    std::vector<agentd::Client*> servers;
    for (std::size_t i = 0; i < cluster.size(); ++i)
      if (cluster.members()[i].up) servers.push_back(&cluster.server(i));
    auto servers_rss = [&servers]() {
      double rss = 0;
      for (auto* s : servers) rss += static_cast<double>(s->info().rss_bytes);
      return rss;
    };
    const double rss0 = servers_rss();
    const auto t0 = std::chrono::steady_clock::now();
    game.create_participants();
    const double participants_s = seconds_since(t0);
    const double rss1 = servers_rss();
    const auto t1 = std::chrono::steady_clock::now();
    game.create_groups();
    const double groups_s = seconds_since(t1);
    const double rss2 = servers_rss();
    const double n = static_cast<double>(o.game.participants);
    std::printf("init: %.3f s (%zu participants in %.3f s, %zu groups in %.3f s)\n",
                participants_s + groups_s, o.game.participants, participants_s, game.group_count(), groups_s);
    std::printf(
        "  servers' RSS per participant: %.0f B for the participants, %.0f B more for the "
        "groups\n",
        (rss1 - rss0) / n, (rss2 - rss1) / n);
    std::fflush(stdout);

    // CPU seconds all servers spent (info().cpu_seconds): against the round's time, how many
    // cores the servers kept busy.
    // And how much their RSS grew (the memory the round's calls in flight took).
    auto servers_usage = [&servers]() {
      std::pair<double, double> cpu_rss(0, 0);
      for (auto* s : servers) {
        const agentd::ServerInfo info = s->info();
        cpu_rss.first += info.cpu_seconds;
        cpu_rss.second += static_cast<double>(info.rss_bytes);
      }
      return cpu_rss;
    };
    for (std::int64_t r = 1; r <= o.rounds; ++r) {
      const auto before = servers_usage();
      const simulation::RoundResult res = game.play_round(r);
      const auto after = servers_usage();
      std::printf(
          "round %lld: %.3f s (guess %.3f s, closest %.3f s; servers' CPU %.2f s, "
          "RSS %+.1f MiB)\n",
          static_cast<long long>(r), res.seconds, res.guess_seconds, res.closest_seconds,
          after.first - before.first, (after.second - before.second) / 1048576.0);
      std::printf("  guesses: %lld, average: %.4f, target (2/3 of it): %.4f\n",
                  static_cast<long long>(res.count), res.average, res.target);
      std::printf("  winner: %s (guess %d, group %s)\n", res.winner.c_str(), res.winner_guess,
                  res.winner_group.c_str());
      std::fflush(stdout);
    }
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const agentd::ServerInfo info = servers[i]->info();
      std::printf("server %zu %s: %llu agents, rss %.1f MiB\n", i, servers[i]->address().c_str(),
                  static_cast<unsigned long long>(info.agent_count), info.rss_bytes / 1048576.0);
    }
    if (!o.cluster.empty()) {
      // Servers of others: remove only what this program made.
      simulation::on_each(servers.size(), [&](std::size_t i) {
        const auto& placed = game.placement()[i];
        for (const auto& g : placed.groups) servers[i]->delete_agent(g.id());
        for (const auto& p : placed.participants) servers[i]->delete_agent(p.id());
      });
    }
  } catch (const agentd::Error& e) {
    std::cerr << "simulation: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "simulation: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
