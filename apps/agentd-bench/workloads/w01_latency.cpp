// W1: call latency.
#include "workloads.h"

#include "workloads/common.h"

#include "baselines.h"

#include "lane_client.h"

#include <future>
#include <optional>

namespace agentd::bench {

namespace {

// The pid whose context switches W1 counts for server 0: the bench's own child only (a --server's
// pid may be another machine's, or another process's here). 0: not counted.
std::int64_t counted_server_pid(Deployment& dep) { return dep.owned() ? dep.client(0).info().pid : 0; }

// The echo's pid to count beside a server counted as server_pid: none when that server is not.
std::int64_t counted_echo_pid(std::int64_t server_pid, const EchoServers& echo) {
  return server_pid != 0 ? echo.pid() : 0;
}

// Server CPU per call (info().cpu_seconds, all its threads) while body makes `calls` calls.
template <typename Body>
double server_cpu_per_call(Client& c, std::size_t calls, Body&& body) {
  const double cpu0 = c.info().cpu_seconds;
  body();
  return (c.info().cpu_seconds - cpu0) * 1e6 / static_cast<double>(calls);
}

// CPU time the calling thread spends in body, per call (CLOCK_THREAD_CPUTIME_ID): what a
// synchronous call costs the program's own thread, polling for its answer included.
template <typename Body>
double thread_cpu_per_call(std::size_t calls, Body&& body) {
  auto now = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
  };
  const double t0 = now();
  body();
  return (now() - t0) / static_cast<double>(calls);
}

// The context-switch rows: every time a thread of the server sleeps and is woken again counts one,
// so they show the thread hand-offs a call costs in each server without a clock.
void finish_switch_row(Row& row, Report& report) {
  if (row.agentd.empty() || row.baseline.empty()) return;
  row.baseline_name = "capnp echo";
  row.note = "informative: the server's context switches, all threads (/proc/PID/task/*/status)";
  report.rows.push_back(std::move(row));
}

// A second connection to server 0 made with ClientOptions::single_thread: the calling thread runs
// its connection while it waits (no hand-off to a loop thread and back), and owns an event loop.
Client single_thread_client(Deployment& dep) {
  const auto [host, port] = split_address(dep.client(0).address());
  ClientOptions options = dep.client_options();
  options.single_thread = true;
  return Client::connect(host, port, options);
}

// The asynchronous echo (examples/async_agents): its reply runs on the server's loop thread
// without a hop to a worker and back, against the bare Cap'n Proto echo, alternating runs. Also
// from a single-thread client: then the call has the bare echo's shape (the program's thread
// drives the connection, the server answers on the thread that read the call), so the gap left
// is agentd's own work per call, in both processes.
void run_w1_async(const Config& cfg, Deployment& dep, EchoServers& echo, Report& report) {
  Client& c = dep.client(0);
  AgentRef a = c.create_agent("AsyncEchoAgent", "bench-w1-async");
  Client single = single_thread_client(dep);
  AgentRef sa = single.create_agent("AsyncEchoAgent", "bench-w1-async-single-thread");
  Msg msg = text_msg(cfg.payload);
  Row reply50{"W1", "async agent reply().get() p50", "us"};
  Row reply99{"W1", "async agent reply().get() p99", "us"};
  Row st50{"W1", "async agent reply().get() p50, single-thread client", "us"};
  Row st_cpu{"W1", "server CPU per async reply()+get(), single-thread client", "us"};
  Row st_switches{"W1", "server context switches per async reply()+get(), single-thread client", "switches"};
  const std::int64_t server_pid = counted_server_pid(dep);
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W1 async repeat {}/{}", r + 1, cfg.repeat));
    auto replies = reply_latencies(a, msg, cfg.calls);
    std::vector<double> single_replies;
    // reply_latencies warms up with 50 calls first; info() itself costs a little.
    st_cpu.agentd.add(server_cpu_per_call(c, cfg.calls + 50, [&] {
      add_switches(st_switches.agentd, server_pid, cfg.calls + 50,
                   [&] { single_replies = reply_latencies(sa, msg, cfg.calls); });
    }));
    const double echo_cpu0 = echo.cpu_seconds();
    std::vector<double> capnp;
    add_switches(st_switches.baseline, counted_echo_pid(server_pid, echo), cfg.calls + 50, [&] {
      // On a thread of its own: this one's event loop belongs to the single-thread client.
      capnp = std::async(std::launch::async, [&] {
                return capnp_echo_latency(echo.capnp_port(), cfg.calls, cfg.payload);
              }).get();
    });
    st_cpu.baseline.add((echo.cpu_seconds() - echo_cpu0) * 1e6 / (cfg.calls + 50));
    add_p50_p99(reply50, reply99, replies, &capnp);
    st50.agentd.add(percentile(single_replies, 50));
    st50.baseline.add(percentile(capnp, 50));
  }
  for (Row* row : {&reply50, &reply99, &st50, &st_cpu}) row->baseline_name = "capnp echo";
  reply50.target = at_most_ratio(1.2, "<= 1.2x");
  st50.note = "informative: the bare echo's shape (no thread hand-off in either process)";
  st_cpu.note = "informative: all server threads (info().cpu_seconds) against the echo process's";
  for (Row* row : {&reply50, &reply99, &st50, &st_cpu}) report.rows.push_back(std::move(*row));
  finish_switch_row(st_switches, report);
  single.delete_agent(sa.id());
  cleanup(dep, 0, {a}, 1);
}

// The same replies from a client made with ClientOptions::single_thread (this thread runs its
// connection while it waits: no hand-off to a loop thread and back), alternating with the usual
// client's, and against the raw TCP ping-pong measured in the same repeat.
void run_w1_single_thread(const Config& cfg, Deployment& dep, EchoServers& echo, Report& report) {
  Client single = single_thread_client(dep);
  AgentRef a = single.create_agent("EchoAgent", "bench-w1-single-thread");
  AgentRef usual = dep.client(0).create_agent("EchoAgent", "bench-w1-usual");
  Msg msg = text_msg(cfg.payload);
  Row st50{"W1", "reply().get() p50, single-thread client", "us"};
  Row st99{"W1", "reply().get() p99, single-thread client", "us"};
  Row st_tcp{"W1", "reply().get() p50, single-thread client vs raw TCP", "us"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W1 single-thread client repeat {}/{}", r + 1, cfg.repeat));
    std::vector<double> mine, theirs;
    alternating(
        r, [&] { mine = reply_latencies(a, msg, cfg.calls); },
        [&] { theirs = reply_latencies(usual, msg, cfg.calls); });
    auto tcp = tcp_pingpong_latency(echo.tcp_port(), cfg.calls, cfg.payload);
    add_p50_p99(st50, st99, mine, &theirs);
    st_tcp.agentd.add(percentile(mine, 50));
    st_tcp.baseline.add(percentile(tcp, 50));
  }
  st50.baseline_name = st99.baseline_name = "usual client";
  st_tcp.baseline_name = "raw TCP";
  st50.note = "informative: ClientOptions::single_thread, for programs that use a client from one thread";
  for (Row* row : {&st50, &st99, &st_tcp}) report.rows.push_back(std::move(*row));
  single.delete_agent(a.id());
  cleanup(dep, 0, {usual}, 1);
}

// The echo's latency and CPU per call (its process's, over the calls and the 50 warm-up calls)
// in one repeat, its context switches added to switches (none when server_pid is not counted).
struct EchoRun {
  std::vector<double> latencies;
  double cpu_per_call = 0;
};
EchoRun echo_run(const Config& cfg, EchoServers& echo, std::int64_t server_pid, Series* switches) {
  EchoRun out;
  const double cpu0 = echo.cpu_seconds();
  auto run = [&] { out.latencies = capnp_echo_latency(echo.capnp_port(), cfg.calls, cfg.payload); };
  if (switches != nullptr)
    add_switches(*switches, counted_echo_pid(server_pid, echo), cfg.calls + 50, run);
  else
    run();
  out.cpu_per_call = (echo.cpu_seconds() - cpu0) * 1e6 / (cfg.calls + 50);
  return out;
}

// The usual client's replies take lanes (README "The synchronous lane"). Beside them: the same
// replies from a client made with LaneUse::off (every call on the RPC connection, as before
// lanes), alternating; and the lane's own floor, the bare lane client (net/lane_client.h) with no
// placeholder, against the bare echo and the raw TCP ping-pong measured in the same repeat.
// Skipped (said so) when server 0 serves no lanes (a --server started with --lane-threads 0).
void run_w1_lane(const Config& cfg, Deployment& dep, EchoServers& echo, Report& report) {
  Client& c = dep.client(0);
  const auto [host, port] = split_address(c.address());
  std::optional<detail::LaneClient> bare;
  try {
    bare.emplace(detail::LaneClient::connect(host, port, dep.client_options().token));
    bare->set_spin(dep.client_options().lane_spin);  // polls for its answers as the client's lanes do
  } catch (const Error& e) {
    progress("W1 lane rows skipped: " + e.message());
    return;
  }
  ClientOptions off_options = dep.client_options();
  off_options.lanes = LaneUse::off;
  Client off = Client::connect(host, port, off_options);
  ClientOptions asleep_options = dep.client_options();
  asleep_options.lane_spin = std::chrono::microseconds(0);
  Client asleep = Client::connect(host, port, asleep_options);
  AgentRef a = off.create_agent("EchoAgent", "bench-w1-lanes-off");
  AgentRef usual = c.create_agent("EchoAgent", "bench-w1-lanes-usual");
  AgentRef sleeper = asleep.create_agent("EchoAgent", "bench-w1-lane-spin-off");
  const std::string agent = a.id();
  Msg msg = text_msg(cfg.payload);
  auto bare_latencies = [&](std::size_t n) {
    std::vector<double> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      detail::Outcome o = bare->reply(agent, new_id(), &msg);
      out.push_back(micros_since(t0));
      const Msg* m = std::get_if<Msg>(&o);
      expect(m != nullptr && m->content == msg.content,
             "W1: the echo agent answered something else on the lane");
    }
    return out;
  };
  Row off50{"W1", "reply().get() p50, lanes off", "us"};
  Row off_cpu{"W1", "server CPU per reply()+get(), lanes off", "us"};
  Row bare50{"W1", "bare lane call p50", "us"};
  Row bare_tcp{"W1", "bare lane call p50 vs raw TCP", "us"};
  Row bare_cpu{"W1", "server CPU per bare lane call", "us"};
  Row spin50{"W1", "reply().get() p50, lane_spin 0", "us"};
  Row spin_cpu{"W1", "client thread CPU per reply()+get(), lane_spin 0", "us"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W1 lanes off / bare lane repeat {}/{}", r + 1, cfg.repeat));
    std::vector<double> rpc, lanes;
    // reply_latencies makes 50 warm-up calls first.
    auto replies_on = [&](AgentRef& ref, std::vector<double>& latencies, Series& cpu) {
      cpu.add(
          server_cpu_per_call(c, cfg.calls + 50, [&] { latencies = reply_latencies(ref, msg, cfg.calls); }));
    };
    alternating(
        r, [&] { replies_on(a, rpc, off_cpu.agentd); }, [&] { replies_on(usual, lanes, off_cpu.baseline); });
    off50.agentd.add(percentile(rpc, 50));
    off50.baseline.add(percentile(lanes, 50));
    // The lane's answer slept for (lane_spin 0) against polled for (the default), alternating.
    std::vector<double> slept, polled;
    alternating(
        r,
        [&] {
          spin_cpu.agentd.add(
              thread_cpu_per_call(cfg.calls + 50, [&] { slept = reply_latencies(sleeper, msg, cfg.calls); }));
        },
        [&] {
          spin_cpu.baseline.add(
              thread_cpu_per_call(cfg.calls + 50, [&] { polled = reply_latencies(usual, msg, cfg.calls); }));
        });
    spin50.agentd.add(percentile(slept, 50));
    spin50.baseline.add(percentile(polled, 50));
    bare_latencies(50);  // warm-up
    std::vector<double> bare_replies;
    bare_cpu.agentd.add(server_cpu_per_call(c, cfg.calls, [&] { bare_replies = bare_latencies(cfg.calls); }));
    EchoRun e = echo_run(cfg, echo, 0, nullptr);  // the echo's switches are W1's main rows'
    bare_cpu.baseline.add(e.cpu_per_call);
    auto tcp = tcp_pingpong_latency(echo.tcp_port(), cfg.calls, cfg.payload);
    bare50.agentd.add(percentile(bare_replies, 50));
    bare50.baseline.add(percentile(e.latencies, 50));
    bare_tcp.agentd.add(percentile(bare_replies, 50));
    bare_tcp.baseline.add(percentile(tcp, 50));
  }
  for (Row* row : {&off50, &off_cpu}) {
    row->baseline_name = "usual client (lanes)";
    row->note = "informative: ClientOptions::lanes = LaneUse::off, every call on the RPC connection";
  }
  for (Row* row : {&spin50, &spin_cpu}) {
    const auto spin = dep.client_options().lane_spin;
    row->baseline_name =
        fmt::format("lane_spin {} us{}", spin.count(), spin == ClientOptions{}.lane_spin ? " (default)" : "");
    row->note = "informative: ClientOptions::lane_spin 0, the lane's answer read by a sleeping thread";
  }
  for (Row* row : {&bare50, &bare_cpu}) row->baseline_name = "capnp echo";
  bare_tcp.baseline_name = "raw TCP";
  for (Row* row : {&bare50, &bare_tcp, &bare_cpu})
    row->note = "informative: the lane with no placeholder or client around it (net/lane_client.h)";
  for (Row* row : {&off50, &off_cpu, &spin50, &spin_cpu, &bare50, &bare_tcp, &bare_cpu})
    report.rows.push_back(std::move(*row));
  bare.reset();
  off.delete_agent(agent);
  asleep.delete_agent(sleeper.id());
  cleanup(dep, 0, {usual}, 1);
}

}  // namespace

void run_w1(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Client& c = dep.client(0);
  AgentRef a = c.create_agent("EchoAgent", "bench-w1");
  Msg msg = text_msg(cfg.payload);
  EchoServers echo;
  Row call50{"W1", "call(\"ping\") p50", "us"}, call99{"W1", "call(\"ping\") p99", "us"};
  Row reply50{"W1", "reply().get() p50", "us"}, reply99{"W1", "reply().get() p99", "us"};
  Row vs_tcp{"W1", "reply().get() p50 vs raw TCP", "us"};
  Row capnp_tcp{"W1", "bare capnp echo p50 vs raw TCP", "us"};
  Row vs_polled{"W1", "reply().get() p50 vs raw TCP, reader polling", "us"};
  // The raw ping-pong with its ends placed (baselines.h Placement): what the unpinned one measured
  // depends on whether the scheduler ran its two sleeping ends on one CPU.
  Row vs_two{"W1", "reply().get() p50 vs raw TCP, ends on two CPUs", "us"};
  Row vs_one{"W1", "reply().get() p50 vs raw TCP, ends on one CPU", "us"};
  // CPU is steadier than latency on a shared machine: server CPU per reply (info().cpu_seconds,
  // all server threads) against the bare echo server process's CPU per call.
  Row cpu{"W1", "server CPU per reply()+get()", "us"};
  Row switches{"W1", "server context switches per reply()+get()", "switches"};
  const std::int64_t server_pid = counted_server_pid(dep);
  const auto lane_calls0 = c.info().lane_calls;
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W1 repeat {}/{}", r + 1, cfg.repeat));
    for (int i = 0; i < 50; ++i) a.call("ping");  // warm-up
    std::vector<double> calls, replies;
    for (std::size_t i = 0; i < cfg.calls; ++i) {
      auto t0 = Clock::now();
      Value v = a.call("ping");
      calls.push_back(micros_since(t0));
      expect(v == "pong", "W1: ping did not answer pong");
    }
    for (int i = 0; i < 50; ++i) a.reply(msg).get();
    // The info() call itself costs a little server CPU; negligible against cfg.calls replies.
    cpu.agentd.add(server_cpu_per_call(c, cfg.calls, [&] {
      add_switches(switches.agentd, server_pid, cfg.calls, [&] {
        for (std::size_t i = 0; i < cfg.calls; ++i) {
          auto t0 = Clock::now();
          Msg m = a.reply(msg).get();
          replies.push_back(micros_since(t0));
          expect(m.content == msg.content, "W1: the echo agent answered something else");
        }
      });
    }));
    EchoRun e = echo_run(cfg, echo, server_pid, &switches.baseline);
    const std::vector<double>& capnp = e.latencies;
    cpu.baseline.add(e.cpu_per_call);
    auto tcp = tcp_pingpong_latency(echo.tcp_port(), cfg.calls, cfg.payload);
    auto tcp_polled =
        tcp_pingpong_latency(echo.tcp_port(), cfg.calls, cfg.payload, dep.client_options().lane_spin);
    vs_polled.agentd.add(percentile(replies, 50));
    vs_polled.baseline.add(percentile(tcp_polled, 50));
    for (auto [row, placement] :
         {std::pair{&vs_two, Placement::two_cpus}, std::pair{&vs_one, Placement::one_cpu}}) {
      auto placed = tcp_pingpong_placed(echo.tcp_port(), echo.pid(), placement, cfg.calls, cfg.payload);
      if (placed.empty()) continue;
      row->agentd.add(percentile(replies, 50));
      row->baseline.add(percentile(placed, 50));
    }
    add_p50_p99(call50, call99, calls);
    add_p50_p99(reply50, reply99, replies);
    vs_tcp.agentd.add(percentile(replies, 50));
    capnp_tcp.agentd.add(percentile(capnp, 50));
    for (Row* row : {&call50, &reply50}) row->baseline.add(percentile(capnp, 50));
    for (Row* row : {&call99, &reply99}) row->baseline.add(percentile(capnp, 99));
    for (Row* row : {&vs_tcp, &capnp_tcp}) row->baseline.add(percentile(tcp, 50));
  }
  if (!cfg.tls_server.empty()) {
    // The same replies on the --tls-server, against this run's plaintext ones.
    Client tc = dep.connect_tls_server();
    AgentRef ta = tc.create_agent("EchoAgent", "bench-w1-tls");
    Row tls50{"W1", "reply().get() p50 over TLS", "us"}, tls99{"W1", "reply().get() p99 over TLS", "us"};
    for (int r = 0; r < cfg.repeat; ++r) {
      progress(fmt::format("W1 over TLS repeat {}/{}", r + 1, cfg.repeat));
      auto plain = reply_latencies(a, msg, cfg.calls);
      auto sealed = reply_latencies(ta, msg, cfg.calls);
      add_p50_p99(tls50, tls99, sealed, &plain);
    }
    for (Row* row : {&tls50, &tls99}) {
      row->baseline_name = "plaintext";
      row->note = "informative: TLS server " + cfg.tls_server;
      report.rows.push_back(std::move(*row));
    }
    tc.delete_agent(ta.id());
  }
  if (!cfg.unix_socket.empty()) {
    // The same replies over the first server's Unix socket, beside a raw Unix-socket ping-pong.
    ClientOptions uo = dep.client_options();
    uo.tls_ca.clear();
    Client uc = Client::connect("unix:" + cfg.unix_socket, 0, uo);
    AgentRef ua = uc.create_agent("EchoAgent", "bench-w1-unix");
    Row unix50{"W1", "reply().get() p50 over Unix socket", "us"};
    Row unix99{"W1", "reply().get() p99 over Unix socket", "us"};
    Row unix_tcp{"W1", "reply().get() p50, Unix socket vs TCP", "us"};
    for (int r = 0; r < cfg.repeat; ++r) {
      progress(fmt::format("W1 over the Unix socket repeat {}/{}", r + 1, cfg.repeat));
      auto over_unix = reply_latencies(ua, msg, cfg.calls);
      auto over_tcp = reply_latencies(a, msg, cfg.calls);
      auto raw = unix_pingpong_latency(cfg.calls, cfg.payload);
      add_p50_p99(unix50, unix99, over_unix, &raw);
      unix_tcp.agentd.add(percentile(over_unix, 50));
      unix_tcp.baseline.add(percentile(over_tcp, 50));
    }
    unix50.baseline_name = unix99.baseline_name = "raw Unix socket";
    unix_tcp.baseline_name = "TCP";
    unix50.note = "aim: within 2x of the raw Unix-socket ping-pong (informative)";
    for (Row* row : {&unix50, &unix99, &unix_tcp}) report.rows.push_back(std::move(*row));
    uc.delete_agent(ua.id());
  }
  // The usual client's replies take lanes when the server serves them (as_server's default; README
  // "The synchronous lane"). A reply held past a millisecond before its get() (its thread
  // descheduled, on a loaded or sanitized machine) goes on the RPC connection instead: the rows
  // say how many took a lane.
  const auto on_lanes = c.info().lane_calls - lane_calls0;
  const std::string share = fmt::format("{} of {} replies took a lane", on_lanes,
                                        static_cast<std::uint64_t>(cfg.repeat) * (cfg.calls + 50));
  for (Row* row : {&reply50, &reply99, &vs_tcp, &cpu}) row->note = share;
  for (Row* row : {&call50, &call99, &reply50, &reply99, &cpu}) row->baseline_name = "capnp echo";
  for (Row* row : {&vs_tcp, &capnp_tcp}) row->baseline_name = "raw TCP";
  // The floor (README "Where a call's time goes"): a call within 1.2x of a raw TCP round trip,
  // below a textbook Cap'n Proto call, on less than 1.2x its server CPU.
  reply50.target = at_most_ratio(1.0, "<= 1.0x");
  vs_tcp.target = at_most_ratio(1.2, "<= 1.2x");
  cpu.target = at_most_ratio(1.2, "<= 1.2x");
  capnp_tcp.note = "informative: the agentd column holds the bare Cap'n Proto echo";
  vs_polled.baseline_name = "raw TCP, polling";
  vs_polled.note = fmt::format(
      "informative: the raw ping-pong's reader polls up to lane_spin ({} us) before it sleeps, as a lane "
      "does",
      dep.client_options().lane_spin.count());
  vs_two.baseline_name = "raw TCP, two CPUs";
  vs_two.note =
      "informative: the bench's thread pinned to one CPU, the echo process to another; agentd's "
      "client and server are not pinned";
  vs_one.baseline_name = "raw TCP, one CPU";
  vs_one.note = "informative: both ends pinned to one CPU, where a wake-up needs no interrupt to another";
  for (Row* row : {&call50, &call99, &reply50, &reply99, &cpu, &vs_tcp, &vs_polled, &capnp_tcp})
    report.rows.push_back(std::move(*row));
  // Only where the CPUs could be set (two_cpus needs two).
  for (Row* row : {&vs_two, &vs_one})
    if (!row->baseline.empty()) report.rows.push_back(std::move(*row));
  finish_switch_row(switches, report);
  cleanup(dep, 0, {a}, 1);
  run_w1_single_thread(cfg, dep, echo, report);
  run_w1_lane(cfg, dep, echo, report);
  if (dep.has_class(0, "AsyncEchoAgent")) run_w1_async(cfg, dep, echo, report);
}

}  // namespace agentd::bench
