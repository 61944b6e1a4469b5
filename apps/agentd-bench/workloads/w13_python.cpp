// W13: agents written in Python (as_server --agent-dir), each row beside the C++ agent doing the
// same work on the same server in the same run: the Python classes are in python_agents/ (passed
// as --agent-dir to the children the bench starts), the C++ ones are the echo_agent and
// async_agents plugins'.
#include "workloads.h"

#include "workloads/common.h"

#include "model_endpoint.h"
#include "subprocess.h"  // thread_count, Subprocess

#include <agentd/error.h>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

namespace agentd::bench {

namespace {

// The classes of python_agents/bench_agents.py, and the C++ classes beside them.
constexpr const char* kPyEcho = "BenchPyEcho";        // beside EchoAgent
constexpr const char* kPySleeper = "BenchPySleeper";  // beside EchoAgent {"sleep_ms": N}
constexpr const char* kPyAsk = "BenchPyAsk";          // beside AskAgent

// The servers cannot host Python agents (no Python host plugin, no agent folder): W13 is skipped,
// not failed.
struct NoPython : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A fresh child with the bench's plugins and its Python agent folder (and a model config when
// given). Throws NoPython when the child cannot load the Python host.
Client spawn_python(const Config& cfg, const Deployment& dep, const std::string& model_config = {}) {
  ChildOptions o = dep.child_options();
  o.agent_dirs = {cfg.py_agent_dir};
  o.model_config_path = model_config;
  try {
    return Client::spawn_child(std::move(o));
  } catch (const Error& e) {
    // PluginLoader::load_python: "--agent-dir needs the Python host plugin, but ... does not
    // exist" or "Python host ...: cannot load: ..." (in the child's stderr, which the error quotes).
    const std::string what = e.message();
    if (what.find("Python host") != std::string::npos)
      throw NoPython("the as_server children cannot host Python agents: " + what);
    throw;
  }
}

struct Latencies {
  std::vector<double> ping, reply;
  double cpu_per_reply = 0;  // server CPU seconds per reply, in microseconds
};

// W1's sequential calls on one agent: call("ping") (answer "pong"), then reply(msg).get()
// (an echo), with the server's CPU over the replies.
Latencies latencies(Client& c, AgentRef& a, const Msg& msg, std::size_t calls) {
  Latencies out;
  for (int i = 0; i < 50; ++i) a.call("ping");  // warm-up
  out.ping.reserve(calls);
  for (std::size_t i = 0; i < calls; ++i) {
    auto t0 = Clock::now();
    Value v = a.call("ping");
    out.ping.push_back(micros_since(t0));
    expect(v == "pong", "W13: ping did not answer pong");
  }
  double cpu0 = c.info().cpu_seconds;
  out.reply = reply_latencies(a, msg, calls);  // 50 more for warm-up, each answer checked
  out.cpu_per_reply = (c.info().cpu_seconds - cpu0) * 1e6 / static_cast<double>(calls + 50);
  return out;
}

// Calls every agent at once and reads every answer; returns the seconds it took. When pid is not
// 0, a thread samples that process's thread count meanwhile and `threads` gets the most it saw.
double all_at_once(std::vector<AgentRef>& agents, const Msg& msg, std::int64_t pid, Series* threads,
                   const std::function<void(const Msg&)>& check) {
  std::atomic<bool> done{false};
  std::atomic<std::size_t> most{0};
  std::optional<std::thread> sampler;
  if (pid != 0 && threads != nullptr)
    sampler.emplace([&] {
      while (!done.load()) {
        std::size_t n = detail::thread_count(static_cast<pid_t>(pid));
        if (n > most.load()) most.store(n);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  double took = 0;
  try {
    auto t0 = Clock::now();
    std::vector<Placeholder> ps;
    ps.reserve(agents.size());
    for (auto& a : agents) ps.push_back(a.reply(msg));
    for (auto& p : ps) check(p.get());
    took = seconds_since(t0);
  } catch (...) {
    done.store(true);
    if (sampler) sampler->join();
    throw;
  }
  done.store(true);
  if (sampler) {
    sampler->join();
    threads->add(static_cast<double>(most.load()));
  }
  return took;
}

// Row 1: a Python echo's sequential ping and reply latencies beside the C++ EchoAgent's.
void run_latency(const Config& cfg, Client& c, Report& report) {
  AgentRef py = c.create_agent(kPyEcho, "bench-w13-py-echo");
  AgentRef cpp = c.create_agent("EchoAgent", "bench-w13-echo");
  Msg msg = text_msg(cfg.payload);
  Row call50{"W13", "Python echo call(\"ping\") p50", "us"},
      call99{"W13", "Python echo call(\"ping\") p99", "us"};
  Row reply50{"W13", "Python echo reply().get() p50", "us"};
  Row reply99{"W13", "Python echo reply().get() p99", "us"};
  Row cpu{"W13", "server CPU per Python echo reply()+get()", "us"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W13 latency repeat {}/{}", r + 1, cfg.repeat));
    Latencies p, q;
    alternating(
        r, [&] { p = latencies(c, py, msg, cfg.calls); }, [&] { q = latencies(c, cpp, msg, cfg.calls); });
    add_p50_p99(call50, call99, p.ping, &q.ping);
    add_p50_p99(reply50, reply99, p.reply, &q.reply);
    cpu.agentd.add(p.cpu_per_reply);
    cpu.baseline.add(q.cpu_per_reply);
  }
  for (Row* row : {&call50, &call99, &reply50, &reply99, &cpu}) row->baseline_name = "C++ EchoAgent";
  call50.target = at_most_ratio(1.5, "<= 1.5x");
  reply50.target = at_most_ratio(1.5, "<= 1.5x");
  for (Row* row : {&call50, &call99, &reply50, &reply99, &cpu}) report.rows.push_back(std::move(*row));
  c.delete_agent(py.id());
  c.delete_agent(cpp.id());
}

// Row 3: blocking Python agents each time.sleep(block) in reply, all called at once, beside as many
// C++ EchoAgents blocking as long (sleep_for) on the same server.
void run_sleepers(const Config& cfg, Client& c, Report& report) {
  const std::size_t n = cfg.py_sleepers;
  progress(fmt::format("W13 creating {} blocking Python agents and {} C++ ones", n, n));
  auto py = c.create_agents(kPySleeper, n, Value{{"sleep_ms", cfg.block_ms}});
  auto cpp = c.create_agents("EchoAgent", n, Value{{"sleep_ms", cfg.block_ms}});
  Msg msg = text_msg(cfg.payload);
  const double block_s = cfg.block_ms / 1000.0;
  Row row{"W13", fmt::format("{} blocking Python agents time.sleep {} ms, called at once", n, cfg.block_ms),
          "s"};
  row.baseline_name = "C++ EchoAgent blocking";
  auto check = [&](const Msg& m) {
    expect(m.content == msg.content, "W13: a sleeper answered something else");
  };
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W13 blocking repeat {}/{}", r + 1, cfg.repeat));
    alternating(
        r, [&] { row.agentd.add(all_at_once(py, msg, 0, nullptr, check)); },
        [&] { row.baseline.add(all_at_once(cpp, msg, 0, nullptr, check)); });
  }
  const double limit = 1.2 * block_s;
  row.target = at_most(limit, fmt::format("<= {:.3g} s", limit));
  report.rows.push_back(std::move(row));
  for (const auto& a : py) c.delete_agent(a.id());
  for (const auto& a : cpp) c.delete_agent(a.id());
}

// Row 2: asynchronous Python agents each awaiting chat_async on a local model endpoint that answers
// after --wait-ms (a child agentd-bench --serve-model, over HTTP), all called at once, beside as
// many C++ AskAgents on the same fresh child; the child's threads while they run (the most seen).
void run_model(const Config& cfg, const Deployment& dep, Report& report) {
  const double wait_s = cfg.wait_ms / 1000.0;
  const std::size_t n = cfg.model_agents;
  EndpointProcess endpoint(std::chrono::milliseconds(cfg.wait_ms));
  const std::string dir = fmt::format("/tmp/agentd-bench-w13-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string config_path = write_delayed_model_config(dir, endpoint.url(), n);
  std::optional<Client> child;
  try {
    child.emplace(spawn_python(cfg, dep, config_path));
  } catch (...) {
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::remove_all(dir);
  Client& c = *child;
  const std::int64_t pid = c.info().pid;
  progress(fmt::format("W13 creating {} asynchronous Python agents and {} C++ ones asking a model", n, n));
  auto py = c.create_agents(kPyAsk, n, Value{{"model", "delayed"}});
  auto cpp = c.create_agents("AskAgent", n, Value{{"model", "delayed"}});
  Row row{"W13",
          fmt::format("{} async Python agents each awaiting a model that takes {} ms (HTTP), at once", n,
                      cfg.wait_ms),
          "s"};
  row.baseline_name = "C++ AskAgent";
  Row threads{"W13", "server threads while the Python agents' model calls run (most seen)", "threads"};
  // Server CPU per call (all its threads): steadier than the wall time on a shared machine.
  Row cpu{"W13", "server CPU per async Python agent's model call", "us"};
  threads.baseline_name = cpu.baseline_name = "C++ AskAgent";
  Msg msg("bench", "hello");
  auto check = [](const Msg& m) { expect(m.text() == "echo: hello", "W13: wrong model answer"); };
  auto measure = [&](std::vector<AgentRef>& agents, Series& time, Series& thread_count, Series& cpu_out) {
    const double cpu0 = c.info().cpu_seconds;
    time.add(all_at_once(agents, msg, pid, &thread_count, check));
    cpu_out.add((c.info().cpu_seconds - cpu0) * 1e6 / static_cast<double>(agents.size()));
  };
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W13 model repeat {}/{}", r + 1, cfg.repeat));
    alternating(
        r, [&] { measure(py, row.agentd, threads.agentd, cpu.agentd); },
        [&] { measure(cpp, row.baseline, threads.baseline, cpu.baseline); });
  }
  const double limit = 3 * wait_s;
  row.target = at_most(limit, fmt::format("<= {:.3g} s", limit));
  threads.target = at_most(64, "<= 64");
  threads.note = "/proc/PID/status Threads of the server, sampled every 20 ms while the calls run";
  report.rows.push_back(std::move(row));
  report.rows.push_back(std::move(threads));
  report.rows.push_back(std::move(cpu));
}

// Row 4: create_agents of Python echo agents (agents/s) and the server's RSS per idle one, beside
// as many C++ EchoAgents; each on a fresh child (with the Python host loaded too) when the bench
// owns its servers, so RSS is not masked by memory freed before.
void run_creation(const Config& cfg, Deployment& dep, Report& report) {
  const std::size_t n = cfg.py_create_n;
  Row rate{"W13", fmt::format("create {} Python agents (create_agents)", n), "agents/s"};
  Row rss{"W13", "server RSS per idle Python agent", "B"};
  rate.baseline_name = rss.baseline_name = "C++ EchoAgent";
  // Creates n agents of cls; adds agents/s and RSS per agent.
  auto measure = [&](const std::string& cls, Series& rate_out, Series& rss_out) {
    std::optional<Client> fresh;
    if (dep.owned()) fresh.emplace(spawn_python(cfg, dep));
    Client& c = fresh ? *fresh : dep.client(0);
    ServerInfo before = c.info();
    auto t0 = Clock::now();
    auto agents = c.create_agents(cls, n);
    rate_out.add(static_cast<double>(n) / seconds_since(t0));
    ServerInfo after = c.info();
    rss_out.add((static_cast<double>(after.rss_bytes) - static_cast<double>(before.rss_bytes)) /
                static_cast<double>(n));
    expect(agents.size() == n, "W13: create_agents made fewer agents than asked");
    if (!fresh) cleanup(dep, 0, agents, cfg.threads);
  };
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W13 creation repeat {}/{} ({} agents)", r + 1, cfg.repeat, n));
    alternating(
        r, [&] { measure(kPyEcho, rate.agentd, rss.agentd); },
        [&] { measure("EchoAgent", rate.baseline, rss.baseline); });
  }
  rate.target = at_least(10000, ">= 10000/s");
  rss.target = at_most(4096, "<= 4096 B (aim)");
  rss.note = std::string("(rss after - rss before) / N, from Client::info().rss_bytes; ") +
             (dep.owned() ? "each on a fresh child with the Python host loaded"
                          : "on server 1, one after the other");
  report.rows.push_back(std::move(rate));
  report.rows.push_back(std::move(rss));
}

// A Python main program's sequential reply(msg).get() on an agent by id: argv host port token
// agent_id calls payload_bytes client (0: the usual one, 1: single_thread=True, 2: lanes=False);
// prints the latencies (us) as one JSON list after a warm-up of 50.
constexpr const char* kPyMainProgram = R"py(
import json, sys, time
import agentd
host, port, token, agent_id = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
calls, payload, kind = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
with agentd.Client.connect(host, port, token=token, single_thread=kind == "1", lanes=False if kind == "2" else None) as c:
    a = c.agent(agent_id)
    msg = agentd.Msg("bench", "x" * payload)
    for _ in range(50):
        a.reply(msg).get()
    out = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        m = a.reply(msg).get()
        out.append((time.perf_counter_ns() - t0) / 1000.0)
        if m.content != msg.content:
            sys.exit("the echo agent answered something else")
    print(json.dumps(out))
)py";

// Everything left to read from fd (a child's pipe), until its end.
std::string read_to_end(kj::AutoCloseFd& fd) {
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return out;
  }
}

// python3 cannot run a main program with the agentd package here: that row is skipped.
struct NoPythonMain : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The latencies of kPyMainProgram against agent on c's server. Throws NoPythonMain when python3
// or the agentd package cannot run it.
enum class PyClient { usual, single_thread, no_lanes };
std::vector<double> python_main_latencies(const Config& cfg, Client& c, const ClientOptions& o,
                                          const AgentRef& agent, PyClient kind = PyClient::usual) {
  auto [host, port] = split_address(c.address());
  detail::SpawnOptions spawn;
  spawn.argv = {"python3",
                "-c",
                kPyMainProgram,
                host,
                std::to_string(port),
                o.token,
                agent.id(),
                std::to_string(cfg.calls),
                std::to_string(cfg.payload),
                std::to_string(static_cast<int>(kind))};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string_view(*e).rfind("PYTHONPATH=", 0) != 0) env.emplace_back(*e);
  // The build's package when this is a build tree's bench; else the installed one.
  std::error_code ec;
  if (std::filesystem::is_directory(AGENTD_BENCH_PYTHON_DIR "/agentd", ec))
    env.push_back("PYTHONPATH=" AGENTD_BENCH_PYTHON_DIR);
  spawn.env = std::move(env);
  spawn.out = detail::Redirect::pipe();
  spawn.err = detail::Redirect::pipe();
  detail::Subprocess child;
  try {
    child = detail::Subprocess::spawn(spawn);
  } catch (const detail::SpawnError& e) {
    throw NoPythonMain(e.what());
  }
  std::string out = read_to_end(child.stdout_pipe());
  std::string err = read_to_end(child.stderr_pipe());
  const int status = child.wait();
  if (status != 0) {
    // A wrong answer is a failure; anything else (no agentd package, a sanitized build's module
    // in an interpreter without its runtime: see tests/python) means this python3 cannot run it.
    if (err.find("answered something else") != std::string::npos)
      throw std::runtime_error("W13: the Python main program: " + err);
    while (!err.empty() && err.back() == '\n') err.pop_back();
    const auto last_line = err.rfind('\n');
    throw NoPythonMain(fmt::format("python3 {}: {}", detail::describe_wait_status(status),
                                   last_line == std::string::npos ? err : err.substr(last_line + 1)));
  }
  auto list = nlohmann::json::parse(out, nullptr, false);
  expect(list.is_array() && list.size() == cfg.calls, "W13: the Python main program printed " + out);
  return list.get<std::vector<double>>();
}

// A Python main program's reply(msg).get() beside a C++ one's, same agent, alternating.
void run_main_program(const Config& cfg, const Deployment& dep, Client& c, Report& report) {
  const ClientOptions o = dep.client_options();
  if (c.address().rfind("unix:", 0) == 0 || !o.tls_ca.empty()) {
    report.skipped.push_back("W13 Python main program row: plaintext TCP servers only");
    return;
  }
  AgentRef a = c.create_agent("EchoAgent", "bench-w13-main");
  Msg msg = text_msg(cfg.payload);
  Row p50{"W13", "Python main program reply().get() p50", "us"};
  Row p99{"W13", "Python main program reply().get() p99", "us"};
  Row st50{"W13", "Python main program reply().get() p50, single_thread=True", "us"};
  Row lanes50{"W13", "Python main program reply().get() p50, lanes=False", "us"};
  const bool lanes = c.info().lane_threads > 0;
  try {
    for (int r = 0; r < cfg.repeat; ++r) {
      progress(fmt::format("W13 Python main program repeat {}/{}", r + 1, cfg.repeat));
      std::vector<double> py, cpp, single;
      alternating(
          r, [&] { py = python_main_latencies(cfg, c, o, a); },
          [&] { cpp = reply_latencies(a, msg, cfg.calls); });
      single = python_main_latencies(cfg, c, o, a, PyClient::single_thread);
      add_p50_p99(p50, p99, py, &cpp);
      st50.agentd.add(percentile(single, 50));
      st50.baseline.add(percentile(py, 50));
      if (lanes) {
        auto off_lanes = python_main_latencies(cfg, c, o, a, PyClient::no_lanes);
        lanes50.agentd.add(percentile(off_lanes, 50));
        lanes50.baseline.add(percentile(py, 50));
      }
    }
  } catch (const NoPythonMain& e) {
    report.skipped.push_back(fmt::format("W13 Python main program row: {}", e.what()));
    c.delete_agent(a.id());
    return;
  }
  for (Row* row : {&p50, &p99}) row->baseline_name = "C++ main program";
  p50.note =
      "informative: the same EchoAgent from a python3 program (agentd package, Client.connect) and "
      "from this one";
  st50.baseline_name = "the same, usual client";
  st50.note =
      "informative: Client.connect(..., single_thread=True): the program's thread runs the connection";
  report.rows.push_back(std::move(p50));
  report.rows.push_back(std::move(p99));
  report.rows.push_back(std::move(st50));
  if (lanes) {
    lanes50.baseline_name = "the same, usual client (lanes)";
    lanes50.note =
        "informative: Client.connect(..., lanes=False): every call on the RPC connection, against the "
        "default, whose replies take lanes (README \"The synchronous lane\")";
    report.rows.push_back(std::move(lanes50));
  }
  c.delete_agent(a.id());
}

}  // namespace

void run_w13(const Config& cfg, Deployment& dep, Report& report) {
#if !AGENTD_BENCH_PYTHON
  (void)cfg;
  (void)dep;
  report.skipped.push_back(
      "W13: agentd was built without Python (AGENTD_BUILD_PYTHON=OFF): no Python agents");
#else
  try {
    std::optional<Client> fresh;
    if (dep.owned()) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(std::filesystem::path(cfg.py_agent_dir) / "bench_agents.py", ec))
        throw NoPython(fmt::format("no bench_agents.py in --py-agent-dir {}", cfg.py_agent_dir));
      fresh.emplace(spawn_python(cfg, dep));
    } else if (!dep.has_class(0, kPyEcho)) {
      throw NoPython(
          fmt::format("server 1 has no {} (start it with --agent-dir {})", kPyEcho, cfg.py_agent_dir));
    }
    Client& c = fresh ? *fresh : dep.client(0);
    ServerInfo info = c.info();
    for (const char* cls : {kPyEcho, kPySleeper, "EchoAgent"})
      expect(has_class(info, cls), fmt::format("W13: server has no agent class {}", cls));
    run_latency(cfg, c, report);
    run_main_program(cfg, dep, c, report);
    if (cfg.model_agents > 0 && dep.owned()) {
      expect(has_class(info, kPyAsk) && has_class(info, "AskAgent"),
             "W13: the server has no BenchPyAsk or AskAgent (the async_agents plugin)");
      run_model(cfg, dep, report);
    } else if (!dep.owned()) {
      report.skipped.push_back("W13 model row: needs servers the bench starts (a local model endpoint)");
    }
    if (cfg.py_sleepers > 0) run_sleepers(cfg, c, report);
    fresh.reset();  // the blocking rows' worker threads go with it
    if (cfg.py_create_n > 0) run_creation(cfg, dep, report);
  } catch (const NoPython& e) {
    report.skipped.push_back(fmt::format("W13: {}", e.what()));
    progress(fmt::format("W13 skipped: {}", e.what()));
  }
#endif
}

}  // namespace agentd::bench
