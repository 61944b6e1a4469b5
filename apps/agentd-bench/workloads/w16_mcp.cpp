// W16: MCP tool calls. A fresh child server has one stdio tool server, "echo": this program run
// as `agentd-bench --serve-mcp-echo` (mcp_echo.h). First a trivial call's latency, measured inside
// the server by an AsyncToolAgent (examples/async_agents) so that the bench's own RPC to the
// agent is not in it, beside the bench calling a second copy of the same tool server directly
// over its pipes (the bare JSON-RPC round trip); then --tool-agents asynchronous agents each
// calling the tool server's "sleep" at once, with the server's threads counted before and while
// they wait.
#include "workloads.h"

#include "workloads/common.h"

#include "mcp_echo.h"
#include "subprocess.h"  // thread_count

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace agentd::bench {

namespace {

constexpr const char* kToolAgent = "AsyncToolAgent";
constexpr std::size_t kWarmup = 50;

// This program's path, for the tool config (the child's /proc/self/exe would be as_server).
std::string this_program() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

// Writes dir/tools.json: the one tool server "echo" (this program --serve-mcp-echo over stdio),
// started with the server. JSON is YAML too, and dump() quotes the path whatever it holds.
std::string write_echo_tool_config(const std::string& dir) {
  const Value config = {{"mcpServers",
                         {{"echo",
                           {{"command", this_program()},
                            {"args", Value::array({"--serve-mcp-echo"})},
                            {"start", "at_start"}}}}}};
  const std::string path = dir + "/tools.json";
  std::ofstream out(path);
  out << config.dump(2) << "\n";
  out.close();
  expect(out.good(), "W16: cannot write " + path);
  return path;
}

// Waits until the child's tool server "echo" runs (Client::tools starts it and waits) and offers
// both tools; throws saying what it is instead.
void require_echo_tool_server(Client& c) {
  for (const ToolServerInfo& s : c.tools(true)) {
    if (s.name != "echo") continue;
    expect(s.state == "running", fmt::format("W16: the tool server 'echo' is {} ({})", s.state,
                                             s.error.empty() ? "no error" : s.error));
    std::size_t found = 0;
    for (const ToolInfo& t : s.tools) found += t.name == "echo" || t.name == "sleep";
    expect(found == 2, "W16: the tool server 'echo' does not offer the tools echo and sleep");
    return;
  }
  throw std::runtime_error("W16: the child server has no tool server 'echo' (--tool-config-path)");
}

// The baseline: sequential tools/call echo "x" straight over the pipes of our own child, after a
// warm-up; microseconds per round trip.
std::vector<double> direct_latencies(McpEchoChild& child, std::size_t calls) {
  for (std::size_t i = 0; i < kWarmup; ++i) child.call_echo("x");
  std::vector<double> out;
  out.reserve(calls);
  for (std::size_t i = 0; i < calls; ++i) {
    auto t0 = Clock::now();
    child.call_echo("x");
    out.push_back(micros_since(t0));
  }
  return out;
}

// The same calls made by the agent through the server's tool registry, timed by the agent around
// each co_await call_async (its method "repeat"), after a warm-up.
std::vector<double> agent_latencies(AgentRef& a, std::size_t calls) {
  auto repeat = [&](std::size_t n) {
    return a.call("repeat", Value{{"tool", "echo/echo"}, {"arguments", {{"message", "x"}}}, {"n", n}});
  };
  repeat(kWarmup);
  Value v = repeat(calls);
  expect(v.is_object() && v.contains("us") && v["us"].is_array() && v["us"].size() == calls,
         "W16: repeat answered something else: " + v.dump().substr(0, 200));
  return v["us"].get<std::vector<double>>();
}

void run_w16_latency(const Config& cfg, Client& c, Report& report) {
  AgentRef a = c.create_agent(kToolAgent, "bench-w16");
  McpEchoChild direct(this_program());
  Row p50{"W16", "tool call p50 (stdio echo, in the server)", "us"};
  Row p99{"W16", "tool call p99 (stdio echo, in the server)", "us"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W16 latency repeat {}/{}", r + 1, cfg.repeat));
    std::vector<double> agentd, bare;
    alternating(
        r, [&] { agentd = agent_latencies(a, cfg.calls); },
        [&] { bare = direct_latencies(direct, cfg.calls); });
    add_p50_p99(p50, p99, agentd, &bare);
  }
  for (Row* row : {&p50, &p99}) row->baseline_name = "bare JSON-RPC pipe";
  p50.target = at_most_ratio(1.5, "<= 1.5x");
  report.rows.push_back(std::move(p50));
  report.rows.push_back(std::move(p99));
}

// Every agent's reply at once; while they wait (until 90% of the sleep has passed), the server's
// threads are sampled every 10 ms. Returns the seconds until every answer was in and checked,
// and the most threads seen.
std::pair<double, std::size_t> all_tool_calls_at_once(std::vector<AgentRef>& agents, const Msg& msg,
                                                      pid_t pid, double wait_s,
                                                      const std::function<void(const Msg&)>& check) {
  auto t0 = Clock::now();
  std::vector<Placeholder> ps;
  ps.reserve(agents.size());
  for (auto& a : agents) ps.push_back(a.reply(msg));
  std::size_t peak = detail::thread_count(pid);
  while (seconds_since(t0) < 0.9 * wait_s) {
    peak = std::max(peak, detail::thread_count(pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& p : ps) check(p.get());
  return {seconds_since(t0), peak};
}

void run_w16_concurrency(const Config& cfg, Client& c, Report& report) {
  const std::size_t n = cfg.tool_agents;
  const double wait_s = cfg.wait_ms / 1000.0;
  const auto pid = static_cast<pid_t>(c.info().pid);
  progress(fmt::format("W16 creating {} asynchronous tool-calling agents", n));
  auto agents = c.create_agents(kToolAgent, n);
  // One echo call from every agent at once first: whatever a first call costs (and any thread it
  // starts for good) is paid before the threads are counted.
  const Msg echo("bench", Value{{"tool", "echo/echo"}, {"arguments", {{"message", "warm"}}}});
  run_windowed(
      n, n, [&](std::size_t i) { return agents[i].reply(echo); },
      [](const Msg& m) {
        expect(m.content.value("isError", true) == false, "W16: the warm-up echo failed");
      });
  const Msg sleep("bench", Value{{"tool", "echo/sleep"}, {"arguments", {{"ms", cfg.wait_ms}}}});
  const std::string slept = fmt::format("slept {} ms", cfg.wait_ms);
  Row time{"W16",
           fmt::format("{} async agents each calling a tool that sleeps {} ms, at once", n, cfg.wait_ms),
           "s"};
  time.baseline_name = "one sleep";
  Row threads{"W16", "server threads while the tool calls wait (peak)", "threads"};
  threads.baseline_name = "before the calls";
  Row added{"W16", "server threads added by the waiting tool calls", "threads"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W16 concurrency repeat {}/{}", r + 1, cfg.repeat));
    const std::size_t before = detail::thread_count(pid);
    auto [seconds, peak] = all_tool_calls_at_once(agents, sleep, pid, wait_s, [&](const Msg& m) {
      const Value& content = m.content.value("content", Value::array());
      expect(!m.content.value("isError", true) && content.size() == 1 &&
                 content[0].value("text", std::string()) == slept,
             "W16: a sleep answered something else: " + m.content.dump().substr(0, 200));
    });
    time.agentd.add(seconds);
    time.baseline.add(wait_s);
    threads.agentd.add(static_cast<double>(peak));
    threads.baseline.add(static_cast<double>(before));
    added.agentd.add(static_cast<double>(peak) - static_cast<double>(before));
  }
  time.target = at_most(2 * wait_s, fmt::format("<= {:.3g} s", 2 * wait_s));
  threads.target = at_most_ratio(1.0, "<= before");
  added.target = at_most(0, "0");
  report.rows.push_back(std::move(time));
  report.rows.push_back(std::move(threads));
  report.rows.push_back(std::move(added));
}

}  // namespace

void run_w16(const Config& cfg, Deployment& dep, Report& report) {
  if (!dep.owned()) {
    report.skipped.push_back("W16: starts its own child server with a tool config (not with --server)");
    return;
  }
  // Declared before the child's Client: the directory outlives the child (which may re-read its
  // config on SIGHUP).
  TempStateDir dir;
  Client c = dep.spawn({"--tool-config-path", write_echo_tool_config(dir.path())});
  if (!has_class(c.info(), kToolAgent)) {
    report.skipped.push_back("W16: no AsyncToolAgent (the async_agents plugin is not in --plugin-dir)");
    return;
  }
  require_echo_tool_server(c);
  run_w16_latency(cfg, c, report);
  if (cfg.tool_agents > 0) run_w16_concurrency(cfg, c, report);
}

}  // namespace agentd::bench
