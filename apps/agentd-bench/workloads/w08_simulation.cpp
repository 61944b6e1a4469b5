// W8: the simulation (guess 2/3 of the average).
#include "workloads.h"

#include "workloads/common.h"

#include "simulation.h"  // examples/simulation: the game's main-side logic
#include "subprocess.h"  // thread_count

#include <atomic>
#include <cmath>
#include <thread>

namespace agentd::bench {

// AgentScope's large-scale simulation, through the library as the `simulation` example plays it
// (examples/simulation/simulation.h): --sim-participants participants with a simulated model
// latency of --sim-latency-ms over --sim-servers fresh child servers (Cluster::spawn_children;
// participants made with Cluster::create_agents), groups beside them, one
// round (main -> groups -> participants). Server RSS per idle participant is measured over the
// participants' creation alone (groups come after); threads are sampled on every server while
// the round runs.
void run_w8(const Config& cfg, Deployment& dep, Report& report) {
  if (!dep.owned()) {
    report.skipped.push_back("W8: starts its own child servers (not with --server)");
    return;
  }
  if (!dep.has_class(0, "ParticipantAgent")) {
    report.skipped.push_back("W8: no ParticipantAgent (the simulation_agents plugin is not in --plugin-dir)");
    return;
  }
  const std::size_t n = cfg.sim_participants;
  const std::size_t m = std::max<std::size_t>(1, cfg.sim_servers);
  Row init{"W8", fmt::format("create {} participants + groups over {} servers", n, m), "s"};
  Row round{
      "W8",
      fmt::format("one round, {} participants (latency {} ms) over {} servers", n, cfg.sim_latency_ms, m),
      "s"};
  Row threads{"W8", "server threads during the round (max over servers)", "threads"};
  Row created{"W8", "server threads after creating the agents (max over servers)", "threads"};
  Row cpu{"W8", "servers' CPU during the round (all servers)", "s"};
  Row rss{"W8", "server RSS per idle participant", "B"};
  std::size_t groups = 0;
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W8 repeat {}/{} ({} participants, {} servers)", r + 1, cfg.repeat, n, m));
    ClusterOptions co;
    co.client = dep.client_options();
    Cluster cluster = Cluster::spawn_children(m, dep.child_options(), co);
    std::vector<std::int64_t> pids;
    std::uint64_t rss_before = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      const ServerInfo info = cluster.server(i).info();
      pids.push_back(info.pid);
      rss_before += info.rss_bytes;
    }
    simulation::GameOptions o;
    o.participants = n;
    o.groups_per_server = cfg.sim_groups_per_server;
    o.latency_ms = cfg.sim_latency_ms;
    simulation::Game game(cluster, o);
    auto t0 = Clock::now();
    game.create_participants();
    const double participants_s = seconds_since(t0);
    std::uint64_t rss_after = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) rss_after += cluster.server(i).info().rss_bytes;
    rss.agentd.add((static_cast<double>(rss_after) - static_cast<double>(rss_before)) / n);
    t0 = Clock::now();
    game.create_groups();
    init.agentd.add(participants_s + seconds_since(t0));
    groups = game.group_count();

    // Creating agents runs their constructors on workers, and on a contended machine the pool's
    // starvation check adds idle threads that leave after 30 s. The round is measured once
    // they have (when there are more than the target allows), so its row counts what the round
    // uses; the creation's peak is its own row.
    std::size_t created_peak = 0;
    auto threads_of = [](std::int64_t pid) { return detail::thread_count(static_cast<pid_t>(pid)); };
    for (auto pid : pids) created_peak = std::max(created_peak, threads_of(pid));
    created.agentd.add(static_cast<double>(created_peak));
    for (auto waited = Clock::now(); seconds_since(waited) < 40;) {
      std::size_t now = 0;
      for (auto pid : pids) now = std::max(now, threads_of(pid));
      if (now < 64) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    std::atomic<bool> done{false};
    std::size_t most = 0;
    std::thread sampler([&] {
      while (!done) {
        for (auto pid : pids) most = std::max(most, threads_of(pid));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    double cpu_before = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) cpu_before += cluster.server(i).info().cpu_seconds;
    simulation::RoundResult res;
    try {
      res = game.play_round(1);
    } catch (...) {
      done = true;
      sampler.join();
      throw;
    }
    done = true;
    sampler.join();
    double cpu_after = 0;
    for (std::size_t i = 0; i < cluster.size(); ++i) cpu_after += cluster.server(i).info().cpu_seconds;
    cpu.agentd.add(cpu_after - cpu_before);
    expect(res.count == static_cast<std::int64_t>(n),
           fmt::format("W8: {} guesses for {} participants", res.count, n));
    expect(!res.winner.empty() && std::abs(res.winner_guess - res.target) <= 100, "W8: no winner");
    round.agentd.add(res.seconds);
    round.baseline.add(cfg.sim_latency_ms / 1000.0);
    threads.agentd.add(static_cast<double>(most));
    progress(
        fmt::format("W8 round {:.3f} s (guess {:.3f} s, closest {:.3f} s), average {:.3f}, "
                    "target {:.3f}, winner {} ({})",
                    res.seconds, res.guess_seconds, res.closest_seconds, res.average, res.target, res.winner,
                    res.winner_guess));
    // The children stop with the cluster; nothing to delete.
  }
  // The two targets (1,000,000 in <= 15 s, 100,000 in <= 2.5 s, latency 1 s) joined by a line:
  // the latency plus a fixed and a per-participant overhead.
  const double limit = cfg.sim_latency_ms / 1000.0 + 0.1111 + 13.889e-6 * static_cast<double>(n);
  round.baseline_name = "one latency";
  round.target = at_most(limit, fmt::format("<= {:.3g} s", limit));
  round.note = "targets: 100,000 <= 2.5 s, 1,000,000 <= 15 s (latency 1 s); between: a line";
  init.note = fmt::format("informative; {} groups", groups);
  threads.target = at_most(63, "< 64");
  threads.note = "sampled every 50 ms; after the creation's idle workers left (up to 40 s)";
  created.note = "informative: idle workers the pool added while constructors queued";
  cpu.note =
      "informative: on cores of their own the round takes about the latency plus this "
      "over the cores";
  rss.target = at_most(1536, "<= 1.5 KiB");
  rss.note = "(rss after - rss before) / N over all servers, participants only";
  for (Row* row : {&init, &round, &cpu, &threads, &created, &rss}) report.rows.push_back(std::move(*row));
}

}  // namespace agentd::bench
