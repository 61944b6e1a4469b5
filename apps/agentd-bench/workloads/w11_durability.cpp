// W11: the cost of durability.
#include "workloads.h"

#include "workloads/common.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace agentd::bench {

namespace {

// The floor of a durable call: what one commit's sync costs on the state dir's disk, timed as n
// writes of a 4 KiB page (cycling over 16 pages of a file there), each followed by fdatasync,
// which is what SQLite does to its write-ahead log per commit (synchronous=FULL). Microseconds.
std::vector<double> fsync_latencies(const std::string& dir, std::size_t n) {
  const std::string path = dir + "/bench-fsync";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error(fmt::format("W11: cannot create {}: {}", path, std::strerror(errno)));
  std::vector<double> out;
  out.reserve(n);
  const std::string page(4096, 'w');
  for (std::size_t i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    bool ok = ::pwrite(fd, page.data(), page.size(), static_cast<off_t>((i % 16) * page.size())) ==
                  static_cast<ssize_t>(page.size()) &&
              ::fdatasync(fd) == 0;
    if (!ok) {
      int e = errno;
      ::close(fd);
      throw std::runtime_error(fmt::format("W11: writing {}: {}", path, std::strerror(e)));
    }
    out.push_back(seconds_since(t0) * 1e6);
  }
  ::close(fd);
  ::unlink(path.c_str());
  return out;
}

}  // namespace

// W1's sequential replies and W2's burst on two fresh children, one without and one with
// --state-dir (a temporary directory), alternating within each repeat so that both see the same
// machine load; the agentd column is the server with the state dir, the baseline the one without.
void run_w11(const Config& cfg, Deployment& dep, Report& report) {
  if (!dep.owned()) {
    report.skipped.push_back(
        "W11: needs servers the bench starts (it compares children with and without --state-dir)");
    return;
  }
  TempStateDir dir;  // outlives the durable child
  Client plain = dep.spawn();
  Client durable = dep.spawn({"--state-dir", dir.path()});
  const ServerInfo plain_info = plain.info(), durable_info = durable.info();
  expect(has_class(plain_info, "EchoAgent"), "W11: the children have no EchoAgent class");
  expect(!durable_info.state_dir.empty(), "W11: the child did not take --state-dir");
  expect(plain_info.state_dir.empty(), "W11: the child without --state-dir has a state dir");
  struct Side {
    Client& client;
    AgentRef agent;
    std::vector<AgentRef> agents;
  };
  Side sides[2] = {{plain, plain.create_agent("EchoAgent", "bench-w11"),
                    plain.create_agents("EchoAgent", cfg.echo_agents)},
                   {durable, durable.create_agent("EchoAgent", "bench-w11"),
                    durable.create_agents("EchoAgent", cfg.echo_agents)}};
  const Msg msg = text_msg(cfg.payload);
  const std::size_t window =
      std::max<std::size_t>(1, std::min(plain_info.max_pool_size, durable_info.max_pool_size) / 2);
  Row p50{"W11", "reply().get() p50, with --state-dir", "us"};
  Row p99{"W11", "reply().get() p99, with --state-dir", "us"};
  Row cpu1{"W11", "server CPU per sequential reply, with --state-dir", "us"};
  Row switches{"W11", "server context switches per sequential reply, with --state-dir", "switches"};
  Row rate{"W11",
           fmt::format("{} replies in flight, {} agents, with --state-dir", cfg.replies, cfg.echo_agents),
           "replies/s"};
  Row cpu2{"W11", "server CPU per reply in flight, with --state-dir", "us"};
  Row floor{"W11", "reply().get() p50, with --state-dir, vs without plus one fsync", "us"};
  Row sync{"W11", "one 4 KiB write + fdatasync in the state dir p50", "us"};
  std::size_t durable_calls = 2 + cfg.echo_agents;  // creations
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W11 repeat {}/{} (without and with --state-dir)", r + 1, cfg.repeat));
    // The first side alternates, so a drift in the machine's load does not favour one.
    // The sync's own cost, measured between the two sides' runs of each repeat.
    const std::size_t syncs = std::min<std::size_t>(cfg.calls, 500);
    double sync_p50 = 0, plain_p50 = 0, durable_p50 = 0;
    for (int k = 0; k < 2; ++k) {
      if (k == 1) sync_p50 = percentile(fsync_latencies(dir.path(), syncs), 50);
      const int s = (k + r) % 2;  // 0: without, 1: with
      Side& side = sides[s];
      Series Row::*col = s == 1 ? &Row::agentd : &Row::baseline;
      double cpu0 = side.client.info().cpu_seconds;
      std::vector<double> lat;
      add_switches(switches.*col, (s == 1 ? durable_info : plain_info).pid, cfg.calls + 50,
                   [&] { lat = reply_latencies(side.agent, msg, cfg.calls); });
      double cpu_seq = (side.client.info().cpu_seconds - cpu0) * 1e6 / (cfg.calls + 50);
      cpu0 = side.client.info().cpu_seconds;
      double burst = reply_burst(side.agents, msg, cfg.replies, window);
      double cpu_burst = (side.client.info().cpu_seconds - cpu0) * 1e6 / cfg.replies;
      const double lat50 = percentile(lat, 50);
      (p50.*col).add(lat50);
      (p99.*col).add(percentile(lat, 99));
      (cpu1.*col).add(cpu_seq);
      (rate.*col).add(burst);
      (cpu2.*col).add(cpu_burst);
      if (s == 1) durable_calls += cfg.calls + 50 + cfg.replies;
      (s == 1 ? durable_p50 : plain_p50) = lat50;
    }
    sync.agentd.add(sync_p50);
    floor.agentd.add(durable_p50);
    floor.baseline.add(plain_p50 + sync_p50);
  }
  const ServerInfo after = durable.info();
  expect(after.state_error.empty(), "W11: the state store failed: " + after.state_error);
  for (Row* row : {&p50, &p99, &cpu1, &switches, &rate, &cpu2}) row->baseline_name = "no state dir";
  switches.note = "informative: all server threads (/proc/PID/task/*/status), the store's writer included";
  floor.baseline_name = "no state dir + one fsync";
  floor.target = at_most_ratio(1.2, "<= 1.2x");
  floor.note =
      "a durable call costs the plain call, the one sync of its commit, and at most 20% more (the "
      "store's own work); the sync is the row below, measured in the same repeat";
  sync.note = "informative: 4 KiB pwrite + fdatasync, what one commit of the write-ahead log syncs";
  rate.target = at_least_ratio(0.5, ">= 0.5x");
  p50.note = "W1's sequential replies to one EchoAgent (memory and a counter saved per call)";
  rate.note = fmt::format("W2's burst on fresh children; {}",
                          window < cfg.replies ? fmt::format("issued in windows of {}", window)
                                               : std::string("all in flight at once"));
  cpu2.note = "all server threads (info().cpu_seconds), the state store's writer included";
  Row size{"W11", "state DB size after the run", "MiB"};
  size.agentd.add(mib(after.state_bytes));
  size.note = fmt::format(
      "informative: {:.0f} B per call over {} calls (agentd.db + WAL; each EchoAgent reply adds "
      "two messages to memory, all kept); commits are not counted by info()",
      static_cast<double>(after.state_bytes) / durable_calls, durable_calls);
  // The switches need both children's /proc, which the bench's own children always have.
  std::vector<Row*> rows{&p50, &floor, &sync, &p99, &cpu1};
  if (!switches.agentd.empty() && !switches.baseline.empty()) rows.push_back(&switches);
  for (Row* row : {&rate, &cpu2, &size}) rows.push_back(row);
  for (Row* row : rows) report.rows.push_back(std::move(*row));
}

}  // namespace agentd::bench
