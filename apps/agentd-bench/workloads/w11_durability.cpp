// W11: the cost of durability.
#include "workloads.h"

#include "workloads/common.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace agentd::bench {

namespace {

// The floor of a durable call: what one commit's sync costs on the state dir's disk, as a write
// of a 4 KiB page (cycling over 16 pages of a file there) followed by fdatasync, which is what
// the state store does to its commit log per commit (a record overwritten in place and synced).
class SyncFile {
 public:
  explicit SyncFile(const std::string& dir) : path_(dir + "/bench-fsync") {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0)
      throw std::runtime_error(fmt::format("W11: cannot create {}: {}", path_, std::strerror(errno)));
  }
  ~SyncFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  SyncFile(const SyncFile&) = delete;
  SyncFile& operator=(const SyncFile&) = delete;

  // One write + fdatasync; microseconds.
  double sync() {
    auto t0 = Clock::now();
    const off_t at = static_cast<off_t>((n_++ % 16) * page_.size());
    if (::pwrite(fd_, page_.data(), page_.size(), at) != static_cast<ssize_t>(page_.size()) ||
        ::fdatasync(fd_) != 0)
      throw std::runtime_error(fmt::format("W11: writing {}: {}", path_, std::strerror(errno)));
    return micros_since(t0);
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::size_t n_ = 0;
  const std::string page_ = std::string(4096, 'w');
};

// What the floor row compares a durable call with, measured as it happens: n times a plain
// reply().get() (the server without a state dir) and then one sync. A sync that follows a call
// costs more than one that follows another sync on a VM whose disk and CPUs idle in between (see
// README "What a durable call's sync costs"), so syncs timed back to back would understate it.
struct CallThenSync {
  std::vector<double> total, sync;  // microseconds, per round
};
CallThenSync call_then_sync(AgentRef& plain, const Msg& msg, SyncFile& file, std::size_t n) {
  CallThenSync out;
  out.total.reserve(n);
  out.sync.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    Msg m = plain.reply(msg).get();
    const double s = file.sync();
    out.total.push_back(micros_since(t0));
    out.sync.push_back(s);
    expect(m.content == msg.content, "W11: the echo agent answered something else");
  }
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
  Row sync_after{"W11", "one 4 KiB write + fdatasync after a plain reply().get() p50", "us"};
  SyncFile sync_file(dir.path());
  std::size_t durable_calls = 2 + cfg.echo_agents;  // creations
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W11 repeat {}/{} (without and with --state-dir)", r + 1, cfg.repeat));
    // The first side alternates, so a drift in the machine's load does not favour one.
    // The sync's own cost, back to back and each after a plain call, measured between the two
    // sides' runs of each repeat.
    const std::size_t syncs = std::min<std::size_t>(cfg.calls, 500);
    double durable_p50 = 0;
    for (int k = 0; k < 2; ++k) {
      if (k == 1) {
        std::vector<double> back_to_back;
        for (std::size_t i = 0; i < syncs; ++i) back_to_back.push_back(sync_file.sync());
        sync.agentd.add(percentile(back_to_back, 50));
        const CallThenSync seq = call_then_sync(sides[0].agent, msg, sync_file, syncs);
        sync_after.agentd.add(percentile(seq.sync, 50));
        floor.baseline.add(percentile(seq.total, 50));
      }
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
      if (s == 1) {
        durable_calls += cfg.calls + 50 + cfg.replies;
        durable_p50 = lat50;
      }
    }
    floor.agentd.add(durable_p50);
  }
  const ServerInfo after = durable.info();
  expect(after.state_error.empty(), "W11: the state store failed: " + after.state_error);
  for (Row* row : {&p50, &p99, &cpu1, &switches, &rate, &cpu2}) row->baseline_name = "no state dir";
  switches.note = "informative: all server threads (/proc/PID/task/*/status), the store's writer included";
  floor.baseline_name = "no state dir + one fsync";
  floor.target = at_most_ratio(1.2, "<= 1.2x");
  floor.note =
      "a durable call costs the plain call, the one sync of its commit, and at most 20% more (the "
      "store's own work); the baseline is a plain reply().get() followed by one 4 KiB write + "
      "fdatasync in the state dir, timed together, in the same repeat";
  sync.note = "informative: 4 KiB pwrite + fdatasync back to back, what one commit of the commit log syncs";
  sync_after.note =
      "informative: the same sync, each right after a call to the server without a state dir (the "
      "floor row's baseline: how a commit meets the disk); above the row before where the disk and "
      "CPUs idle during the call";
  rate.target = at_least_ratio(0.5, ">= 0.5x");
  p50.note = "W1's sequential replies to one EchoAgent (memory and a counter saved per call)";
  rate.note = fmt::format("W2's burst on fresh children; {}",
                          window < cfg.replies ? fmt::format("issued in windows of {}", window)
                                               : std::string("all in flight at once"));
  cpu2.note = "all server threads (info().cpu_seconds), the state store's writer and applier included";
  Row size{"W11", "state DB size after the run", "MiB"};
  size.agentd.add(mib(after.state_bytes));
  size.note = fmt::format(
      "informative: {:.0f} B per call over {} calls (agentd.db + WAL + the 8 MiB commit log; each EchoAgent "
      "reply adds "
      "two messages to memory, all kept); commits are not counted by info()",
      static_cast<double>(after.state_bytes) / durable_calls, durable_calls);
  // The switches need both children's /proc, which the bench's own children always have.
  std::vector<Row*> rows{&p50, &floor, &sync, &sync_after, &p99, &cpu1};
  if (!switches.agentd.empty() && !switches.baseline.empty()) rows.push_back(&switches);
  for (Row* row : {&rate, &cpu2, &size}) rows.push_back(row);
  for (Row* row : rows) report.rows.push_back(std::move(*row));
}

}  // namespace agentd::bench
