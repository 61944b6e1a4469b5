// agentd-bench: measures an agentd deployment with the standard workloads and prints each figure
// beside a baseline measured in the same run. main() is the wiring: options -> servers ->
// workloads -> report.
#include "baselines.h"
#include "compare.h"
#include "mcp_echo.h"
#include "model_endpoint.h"
#include "stats.h"
#include "tokens.h"
#include "workloads.h"

#include <agentd/error.h>
#include <agentd/version.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <utility>
#include <vector>
#include <sstream>
#include <thread>

namespace po = boost::program_options;
using namespace agentd::bench;

namespace {

constexpr const char* kAbout =
    R"(agentd-bench: the standard agentd workloads, each beside a baseline measured in the same run

Usage: agentd-bench [options]

Without --server the bench starts its own as_server children (child mode) with the build's
plugins and measures them over loopback TCP, the link of its TCP baselines and of the servers'
own hand-offs; with --server host:port (repeatable) it measures running servers, which must
have the echo_agent and web_agent plugins (W6 needs two servers). On servers it did not start,
the bench deletes only the agents it created.

Workloads (all by default; choose with --workloads W1,W5):
  W1  call latency: sequential call("ping") and reply(msg).get() on an echo agent, p50/p99 (us),
      beside a bare Cap'n Proto echo (same RPC stack, no agentd) and a raw TCP ping-pong, both
      answered by a child process of the bench's (--serve-echo), as agentd's are by as_server (the
      ping-pong also with its two ends pinned to two CPUs and to one: a wake-up within one CPU
      can cost a fraction of one across CPUs, and unpinned the scheduler picks); then the same
      replies from a single-thread client (ClientOptions::single_thread) beside the
      usual client's; then an asynchronous echo agent (AsyncEchoAgent, when a plugin has it)
      from the usual client and from a single-thread client (the bare echo's shape: no thread
      hand-off in either process), latency and server CPU beside the bare echo's. With its own
      children, also the server's context switches per call (each thread hand-off costs some)
  W2  throughput: --replies replies in flight to 10 echo agents, then all read (replies/s),
      beside --replies pipelined bare Cap'n Proto echo calls
  W3  the tutorial scenario: 5 web agents sleeping --sleep-ms: child-mode init (spawn + create),
      independent-mode init (connect + create), sequential and distributed (all at once) time
  W4  create --create-n agents with create_agents (agents/s), server RSS per idle agent, then
      one reply to each (calls/s); also up to 10,000 create_agent calls from --threads threads;
      on a fresh child each repeat when the bench owns servers
  W5  a --chain-agent chain with placeholders passed along (one get()) vs the same awaited calls;
      each repeat keeps the median of five of each
  W6  a --message-bytes message from an agent on server 1 to one on server 2: time and bytes
      through this client, vs fetching the message directly (server byte counters in info());
      each repeat keeps the median of five of each
  W7  --agents agents whose reply blocks --block-ms, all called at once: total time; then
      --async-agents asynchronous agents (WaitAgent) each waiting --wait-ms without a thread,
      all called at once: total time and the server's thread count; then --model-agents
      asynchronous agents (AskAgent) each asking a local model endpoint that answers after
      --wait-ms (agentd-bench --serve-model, over HTTP), all at once, on a fresh child server
  W8  the simulation (guess 2/3 of the average, examples/simulation): --sim-participants
      participants (default 100,000) each guessing after a simulated model latency of
      --sim-latency-ms, spread over --sim-servers fresh child servers (default 4) with groups
      beside them; one round (main -> groups -> participants, all placeholders): creation
      time, round time, server threads during the round, server RSS per idle participant.
      The paper's million: --workloads W8 --sim-participants 1000000 --repeat 1
  W10 streamed replies: the agent stamps each chunk with its steady_clock time, the bench
      subtracts on arrival: first-chunk latency p50/p99 and any chunk's p99 (us); needs the
      server on this machine
  W9  bulk: create --bulk-n agents, one reply to each with every call in flight before the
      first get(), then read them all in order (replies/s, server RSS); on a fresh child each
      repeat when the bench owns servers. Not in the default set (a million agents take about
      a minute and 3 GiB): ask for it with --workloads W9
  W11 the cost of durability: W1's sequential replies (p50/p99, server CPU and context
      switches per reply) and W2's burst (replies/s, server CPU per reply) on two fresh
      children, one without and one with --state-dir (a temporary directory the bench
      removes), alternating; ratios are with/without; the floor row compares the durable
      call with a plain call followed by one 4 KiB write + fdatasync in the state dir, timed
      together; then the state database's size (a few seconds)
  W12 soak: --soak-calls replies (default 1,000,000) over --soak-connections connections
      (default 100, each its own Client and thread over loopback TCP, to --soak-agents agents
      of its own that keep no memory) to one fresh child with --state-dir, at most --soak-window
      in flight per connection (the child's --max-pool-size is twice what may be in flight):
      errors, calls/s, server RSS after the first 30% of the calls, its peak and at the end (growth),
      the state database's size. Runs once whatever --repeat. Not in the default set:
      --workloads W12
  W13 agents written in Python (as_server --agent-dir with the bench's python_agents/, see
      --py-agent-dir), each beside the C++ agent doing the same work on the same server: a
      Python echo's sequential call("ping") and reply(msg).get() p50/p99 (us) and server CPU
      per reply beside the C++ EchoAgent's; a Python main program's reply(msg).get() p50/p99
      (python3 with the agentd package) beside this program's, same EchoAgent (plaintext TCP
      servers only); --model-agents async Python agents each awaiting
      chat_async on a local model endpoint that answers after --wait-ms, all at once, beside
      as many C++ AskAgents (time, and the server's threads: the most seen meanwhile);
      --py-sleepers blocking Python agents each time.sleep(--block-ms), all at once, beside
      blocking C++ EchoAgents; create_agents of --py-create-n Python agents (agents/s) and
      the server's RSS per idle one, beside as many C++ EchoAgents, each on a fresh child.
      Skipped (not failed) when the servers cannot host Python agents (no Python host
      plugin); with --server, server 1 must have been started with that --agent-dir
  W14 agentd-gateway (the HTTP gateway, OpenAI-compatible API) in front of server 1, a child of
      the bench (--gateway, else $AGENTD_GATEWAY, beside agentd-bench, $PATH), its --threads
      --gateway-threads: sequential non-streamed chat completions over one keep-alive connection
      (p50/p99, and the p50 overhead over the same reply through the C++ client, same EchoAgent,
      alternating blocks); --gateway-requests completions over --gateway-connections keep-alive
      connections to 10 EchoAgents (completions/s beside a W2 burst through the C++ client; the
      gateway's CPU per completion, threads and RSS); --gateway-streams streamed completions
      (StreamEchoAgent, "stream": true) all at once, one connection each, on a fresh gateway per
      repeat: the time until every [DONE] is in, every text checked, the gateway's peak RSS. The
      HTTP clients are the bench's own (Boost.Beast, asynchronous, one thread). Skipped (not
      failed) when there is no agentd-gateway
  W15 the console's cost to server 1: --console-agents EchoAgents (a fresh child per repeat),
      1,000 called once; pages of 100 through Client::query_agents (p50 of 20 round trips):
      by id, by id at the middle, busiest first, a search; the first page through the
      gateway's GET /console/api/agents; and the server's CPU over --console-seconds with a
      gateway in front (its console samples every server once a second) beside the same time
      without one. The gateway parts are skipped when there is no agentd-gateway
  W16 MCP tool calls, on a fresh child whose one tool server (stdio) is this program run as
      --serve-mcp-echo: an AsyncToolAgent's sequential calls of its echo tool, timed inside
      the server (p50/p99, us, --calls), beside the bench calling another copy of that tool
      server directly over its pipes (the bare JSON-RPC round trip); then --tool-agents
      AsyncToolAgents each calling its sleep tool for --wait-ms, all at once: the time until
      every answer is in and checked, and the server's threads before and at most while they
      wait (no thread may be added)

Every figure is measured --repeat times; the table shows the median and the spread (half the
range over the median). Ratios are agentd/baseline (W5: baseline/agentd, a speed-up). Compare
ratios, not absolute figures, across machines; on a shared machine, repeat.

--compare OLD.json prints, after this run's table, OLD's figures beside this run's for every
row of either: this run's median over OLD's (a regression shows as a ratio), each run's own
ratio to its baseline, and a verdict (worse or better by more than 5%, or the same), with the
count of rows worse. Save a run with --json before a change, run the same workloads after it.

Examples:
  agentd-bench                                   # everything, own servers, full sizes
  agentd-bench --quick                           # small sizes, 1 repeat, a few seconds
  agentd-bench --workloads W1,W2 --repeat 5 --json > w1w2.json
  agentd-bench --workloads W1,W2 --repeat 5 --compare w1w2.json   # after a change
  agentd-bench --server 10.0.0.1:12310 --server 10.0.0.2:12310 --workloads W6

Options)";

std::set<std::string> parse_workloads(const std::string& list) {
  std::set<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    for (auto& ch : item) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const bool known = item == "W10" || item == "W11" || item == "W12" || item == "W13" || item == "W14" ||
                       item == "W15" || item == "W16" ||
                       (item.size() == 2 && item[0] == 'W' && item[1] >= '1' && item[1] <= '9');
    if (!known) throw po::error(fmt::format("--workloads: unknown workload '{}' (W1..W16)", item));
    out.insert(item);
  }
  return out;
}

std::string default_plugin_dir() {
  std::error_code ec;
  if (std::filesystem::is_directory(AGENTD_BENCH_PLUGIN_DIR, ec)) return AGENTD_BENCH_PLUGIN_DIR;
  return AGENTD_BENCH_INSTALLED_PLUGIN_DIR;
}

// The bench's Python agent classes (W13): the source tree's, else the installed copy.
std::string default_py_agent_dir() {
  std::error_code ec;
  if (std::filesystem::is_directory(AGENTD_BENCH_PY_AGENT_DIR, ec)) return AGENTD_BENCH_PY_AGENT_DIR;
  return AGENTD_BENCH_INSTALLED_PY_AGENT_DIR;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  bool json = false;
  std::string compare_path;
  std::string token_file;
  std::string workloads = "W1,W2,W3,W4,W5,W6,W7,W8,W10,W11,W13,W14,W15,W16";
  po::options_description opts(kAbout);
  // Sizes have a full and a --quick default; an explicit option wins over both.
  opts.add_options()("help,h", "print this help and exit")("version", "print the version and exit")(
      "server,s", po::value<std::vector<std::string>>(&cfg.servers)->composing()->value_name("HOST:PORT"),
      "a running as_server to measure (repeatable); default: start own children")(
      "token-file", po::value<std::string>(&token_file)->value_name("FILE"),
      "log in to the --server servers with the token in FILE (default: $AGENTD_TOKEN)")(
      "tls-ca", po::value<std::string>(&cfg.tls_ca)->value_name("FILE"),
      "connect to the --server servers over TLS (or only to --tls-server when given), trusting "
      "the CA certificates in FILE (PEM)")(
      "unix-socket", po::value<std::string>(&cfg.unix_socket)->value_name("PATH"),
      "the first --server's --unix-socket: W1 also runs over it, beside a raw Unix-socket "
      "ping-pong")("tls-server", po::value<std::string>(&cfg.tls_server)->value_name("HOST:PORT"),
                   "a server serving TLS: W1 and W2 also run there, beside the first server's plaintext "
                   "numbers of the same run (needs --tls-ca)")(
      "tls-cert", po::value<std::string>(&cfg.tls_cert)->value_name("FILE"),
      "with --tls-key: a client certificate for servers that require one")(
      "tls-key", po::value<std::string>(&cfg.tls_key)->value_name("FILE"), "the key of --tls-cert")(
      "plugin-dir",
      po::value<std::string>(&cfg.plugin_dir)->default_value(default_plugin_dir())->value_name("DIR"),
      "plugins for the children the bench starts")(
      "py-agent-dir",
      po::value<std::string>(&cfg.py_agent_dir)->default_value(default_py_agent_dir())->value_name("DIR"),
      "W13's Python agent classes (bench_agents.py), the --agent-dir of the children it starts")(
      "as-server", po::value<std::string>(&cfg.as_server)->value_name("PATH"),
      "as_server binary for children (default: $AGENTD_AS_SERVER, then next to agentd-bench, "
      "then installed, then $PATH)")(
      "workloads,w", po::value<std::string>(&workloads)->default_value(workloads)->value_name("LIST"),
      "comma-separated workloads to run")("repeat,r", po::value<int>(),
                                          "repetitions of each workload (default 3; --quick: 1)")(
      "quick", po::bool_switch(&cfg.quick), "small sizes for a smoke run (CI)")(
      "json", po::bool_switch(&json), "print the results as JSON on stdout instead of the table")(
      "compare", po::value<std::string>(&compare_path)->value_name("OLD.json"),
      "print OLD.json's figures (an earlier run's --json) beside this run's; with --json, as "
      "its \"compare\" member")(
      "threads", po::value<std::size_t>(&cfg.threads)->default_value(cfg.threads)->value_name("N"),
      "client threads for W4's one-at-a-time create_agent row and for deleting agents")(
      "payload", po::value<std::size_t>(&cfg.payload)->default_value(cfg.payload)->value_name("BYTES"),
      "message content size in W1/W2/W4/W5/W7 and the baselines")(
      "calls", po::value<std::size_t>()->value_name("N"),
      "W1 and W16 calls per repeat (default 2000; quick 200)")(
      "lane-spin", po::value<long>(&cfg.lane_spin_us)->value_name("US"),
      "the bench's C++ clients poll a lane for each answer this long before they sleep "
      "(ClientOptions::lane_spin, 0..10000 microseconds; default: the client's own, 100)")(
      "replies", po::value<std::size_t>()->value_name("N"),
      "W2 replies per repeat (default 4000; quick 300)")("sleep-ms", po::value<int>()->value_name("MS"),
                                                         "W3 web agent sleep (default 5000; quick 100)")(
      "create-n", po::value<std::size_t>()->value_name("N"),
      "W4 agents to create (default 100000; quick 1000)")("chain", po::value<std::size_t>()->value_name("N"),
                                                          "W5 chain length (default 100)")(
      "message-bytes", po::value<std::size_t>()->value_name("BYTES"), "W6 message size (default 1048576)")(
      "agents", po::value<std::size_t>()->value_name("N"), "W7 blocking agents (default 1000; quick 50)")(
      "block-ms", po::value<int>()->value_name("MS"), "W7 and W13 block per reply (default 1000; quick 200)")(
      "async-agents", po::value<std::size_t>()->value_name("N"),
      "W7 asynchronous agents waiting at once (default 100000; quick 2000)")(
      "wait-ms", po::value<int>()->value_name("MS"),
      "W7 asynchronous wait per reply, W16 the tool's sleep (default 1000; quick 200)")(
      "model-agents", po::value<std::size_t>()->value_name("N"),
      "W7 asynchronous agents asking a local model endpoint that answers after --wait-ms, all at "
      "once (default 10000; quick 200; 0: skip; needs servers the bench starts); W13 as many "
      "Python ones and as many C++ ones")(
      "py-sleepers", po::value<std::size_t>()->value_name("N"),
      "W13 blocking Python agents each time.sleep(--block-ms), all at once (default 100; quick 20; 0: skip)")(
      "py-create-n", po::value<std::size_t>()->value_name("N"),
      "W13 Python agents to create (default 100000; quick 1000; 0: skip)")(
      "gateway", po::value<std::string>(&cfg.gateway)->value_name("PATH"),
      "W14's agentd-gateway binary (default: $AGENTD_GATEWAY, then next to agentd-bench, then $PATH)")(
      "gateway-threads",
      po::value<unsigned>(&cfg.gateway_threads)->default_value(cfg.gateway_threads)->value_name("N"),
      "W14 the gateway's --threads")("gateway-connections", po::value<std::size_t>()->value_name("N"),
                                     "W14 keep-alive connections of the load part (default 64; quick 8)")(
      "gateway-requests", po::value<std::size_t>()->value_name("N"),
      "W14 completions of the load part per repeat (default 60000; quick 2000; 0: skip)")(
      "gateway-streams", po::value<std::size_t>()->value_name("N"),
      "W14 streamed completions at once (default 1000; quick 50; 0: skip)")(
      "console-agents", po::value<std::size_t>()->value_name("N"),
      "W15 agents (default 1000000; quick 2000)")(
      "console-seconds", po::value<int>()->value_name("S"),
      "W15 time the server's CPU is measured over, with and without the gateway (default 20; quick 3)")(
      "tool-agents", po::value<std::size_t>()->value_name("N"),
      "W16 asynchronous agents each calling a tool that sleeps --wait-ms, all at once (default 1000; "
      "quick 100; 0: skip)")("bulk-n", po::value<std::size_t>()->value_name("N"),
                             "W9 agents (default 1000000; quick 2000)")(
      "sim-participants", po::value<std::size_t>()->value_name("N"),
      "W8 participants in all (default 100000; quick 2000; the paper's run: 1000000)")(
      "sim-servers", po::value<std::size_t>()->value_name("M"), "W8 child servers (default 4)")(
      "sim-groups-per-server", po::value<std::size_t>()->value_name("G"),
      "W8 groups per server (default: one per 5000 participants of a server)")(
      "sim-latency-ms", po::value<int>()->value_name("MS"),
      "W8 participants' simulated model latency (default 1000; quick 200)")(
      "soak-calls", po::value<std::size_t>()->value_name("N"),
      "W12 replies in all (default 1000000; quick 20000)")(
      "soak-connections", po::value<std::size_t>()->value_name("N"),
      "W12 connections (default 100; quick 10)")("soak-window", po::value<std::size_t>()->value_name("N"),
                                                 "W12 calls in flight per connection (default 250)")(
      "soak-agents", po::value<std::size_t>()->value_name("N"), "W12 agents per connection (default 4)")(
      "soak-without-state", po::bool_switch(&cfg.soak_without_state),
      "W12 on a child without --state-dir (to tell the store's share of the figures)")(
      "serve-model", po::value<unsigned>()->value_name("PORT"),
      "only run a local OpenAI-compatible model endpoint on 127.0.0.1:PORT (0: any free port, printed as "
      "\"PORT n\") that answers each POST /v1/chat/completions after --model-delay-ms, until SIGTERM/SIGINT")(
      "model-delay-ms", po::value<int>()->default_value(1000)->value_name("MS"),
      "the local model endpoint's delay per answer")(
      "model-calls", po::value<std::size_t>()->value_name("N"),
      "only measure N concurrent asynchronous model calls (chat_async) from one loop against the local model "
      "endpoint (started as a child process) or --model-url: total time and thread count, twice (new, then "
      "kept-alive connections)")(
      "model-url", po::value<std::string>()->value_name("URL"),
      "--model-calls against this OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1) instead")(
      "model-stream", "--model-calls streams (stream_async) instead")(
      "serve-echo",
      "only run the baselines' echo servers (a bare Cap'n Proto echo and a raw TCP echo on 127.0.0.1, "
      "any free ports, printed as \"PORT capnp tcp\") until stdin closes or SIGTERM/SIGINT; W1 and W2 "
      "start one as a child process, so that the baselines, like agentd, answer from another process")(
      "serve-mcp-echo",
      "only run W16's MCP tool server over stdio (newline-delimited JSON-RPC; tools echo and sleep) "
      "until stdin closes");

  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
    cfg.workloads = parse_workloads(workloads);
  } catch (const po::error& e) {
    fmt::print(stderr, "agentd-bench: {} (see agentd-bench --help)\n", e.what());
    return 2;
  }
  if (!cfg.tls_server.empty() && cfg.tls_ca.empty()) {
    fmt::print(stderr,
               "agentd-bench: --tls-server needs --tls-ca FILE (the CA that signed its "
               "certificate)\n");
    return 2;
  }
  if (!token_file.empty()) {
    try {
      cfg.token = agentd::detail::read_token_file(token_file, "--token-file").front();
    } catch (const agentd::Error& e) {
      fmt::print(stderr, "agentd-bench: {}\n", e.message());
      return 2;
    }
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  if (vm.count("version")) {
    fmt::print("agentd-bench (agentd) {}\n", AGENTD_VERSION_STRING);
    return 0;
  }
  if (vm.count("serve-mcp-echo")) return serve_mcp_echo();
  if (vm.count("serve-echo")) return serve_echo();
  if (vm.count("serve-model") || vm.count("model-calls")) {
    const int delay_ms = vm["model-delay-ms"].as<int>();
    if (delay_ms < 0) {
      fmt::print(stderr, "agentd-bench: --model-delay-ms must not be negative\n");
      return 2;
    }
    try {
      if (vm.count("serve-model")) {
        unsigned port = vm["serve-model"].as<unsigned>();
        if (port > 65535) {
          fmt::print(stderr, "agentd-bench: --serve-model {}: not a port (0..65535)\n", port);
          return 2;
        }
        return serve_model(static_cast<std::uint16_t>(port), std::chrono::milliseconds(delay_ms));
      }
      return model_calls_bench(vm["model-calls"].as<std::size_t>(), std::chrono::milliseconds(delay_ms),
                               vm.count("model-url") ? vm["model-url"].as<std::string>() : std::string(),
                               vm.count("model-stream") > 0);
    } catch (const std::exception& e) {
      fmt::print(stderr, "agentd-bench: {}\n", e.what());
      return 1;
    }
  }
  auto size = [&](const char* name, std::size_t full, std::size_t quick) {
    return vm.count(name) ? vm[name].as<std::size_t>() : (cfg.quick ? quick : full);
  };
  auto ms = [&](const char* name, int full, int quick) {
    return vm.count(name) ? vm[name].as<int>() : (cfg.quick ? quick : full);
  };
  if (vm.count("lane-spin") && (cfg.lane_spin_us < 0 || cfg.lane_spin_us > 10000)) {
    fmt::print(stderr, "agentd-bench: --lane-spin {}: must be 0..10000 microseconds\n", cfg.lane_spin_us);
    return 2;
  }
  cfg.repeat = vm.count("repeat") ? std::max(1, vm["repeat"].as<int>()) : (cfg.quick ? 1 : 3);
  cfg.calls = size("calls", 2000, 200);
  cfg.replies = size("replies", 4000, 300);
  cfg.sleep_ms = ms("sleep-ms", 5000, 100);
  cfg.create_n = size("create-n", 100000, 1000);
  cfg.chain = std::max<std::size_t>(2, size("chain", 100, 100));
  cfg.message_bytes = size("message-bytes", 1 << 20, 1 << 20);
  cfg.agents = size("agents", 1000, 50);
  cfg.block_ms = ms("block-ms", 1000, 200);
  cfg.async_agents = size("async-agents", 100000, 2000);
  cfg.wait_ms = ms("wait-ms", 1000, 200);
  cfg.model_agents = size("model-agents", 10000, 200);
  cfg.bulk_n = size("bulk-n", 1000000, 2000);
  cfg.sim_participants = std::max<std::size_t>(1, size("sim-participants", 100000, 2000));
  cfg.sim_servers = std::max<std::size_t>(1, size("sim-servers", 4, 4));
  cfg.sim_groups_per_server = size("sim-groups-per-server", 0, 0);
  cfg.sim_latency_ms = std::max(0, ms("sim-latency-ms", 1000, 200));
  cfg.soak_calls = size("soak-calls", 1000000, 20000);
  cfg.soak_connections = std::max<std::size_t>(1, size("soak-connections", 100, 10));
  cfg.soak_window = std::max<std::size_t>(1, size("soak-window", 250, 250));
  cfg.soak_agents = std::max<std::size_t>(1, size("soak-agents", 4, 4));
  cfg.py_sleepers = size("py-sleepers", 100, 20);
  cfg.py_create_n = size("py-create-n", 100000, 1000);
  cfg.gateway_connections = std::max<std::size_t>(1, size("gateway-connections", 64, 8));
  cfg.gateway_requests = size("gateway-requests", 60000, 2000);
  cfg.gateway_streams = size("gateway-streams", 1000, 50);
  cfg.gateway_threads = std::max(1u, cfg.gateway_threads);
  cfg.console_agents = std::max<std::size_t>(1, size("console-agents", 1000000, 2000));
  cfg.console_seconds = std::max(1, ms("console-seconds", 20, 3));
  cfg.tool_agents = size("tool-agents", 1000, 100);

  std::optional<OldRun> old_run;
  if (!compare_path.empty()) {
    try {
      old_run = read_old_run(compare_path);
    } catch (const std::exception& e) {
      fmt::print(stderr, "agentd-bench: {}\n", e.what());
      return 2;
    }
  }

  Report report;
  report.judged = !cfg.quick;
  for (int i = 0; i < argc; ++i) report.command += (i ? " " : "") + std::string(argv[i]);
  int status = 0;
  try {
    bool two = cfg.workloads.count("W6") || cfg.workloads.count("W3");
    Deployment dep(cfg, two ? 2 : 1);
    report.environment = fmt::format("{}; agentd {}; {} hardware threads", dep.describe(),
                                     AGENTD_VERSION_STRING, std::thread::hardware_concurrency());
    fmt::print(stderr, "agentd-bench: {}\n", report.environment);
    // In this order (a vector: a std::map would put W10 and W11 between W1 and W2).
    const std::vector<std::pair<std::string, void (*)(const Config&, Deployment&, Report&)>> runners{
        {"W1", run_w1},   {"W2", run_w2},   {"W3", run_w3},   {"W4", run_w4},
        {"W5", run_w5},   {"W6", run_w6},   {"W7", run_w7},   {"W8", run_w8},
        {"W9", run_w9},   {"W10", run_w10}, {"W11", run_w11}, {"W12", run_w12},
        {"W13", run_w13}, {"W14", run_w14}, {"W15", run_w15}, {"W16", run_w16}};
    for (const auto& [name, run] : runners) {
      if (!cfg.workloads.count(name)) continue;
      try {
        run(cfg, dep, report);
      } catch (const std::exception& e) {
        fmt::print(stderr, "agentd-bench: bench error in {}: {}\n", name, e.what());
        report.skipped.push_back(fmt::format("{}: failed: {}", name, e.what()));
        status = 1;
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "agentd-bench: bench error: {}\n", e.what());
    return 1;
  }
  std::optional<Comparison> comparison;
  if (old_run) comparison = compare_runs(*old_run, report);
  if (json) {
    std::cout << (comparison ? comparison->add_to_json(report.json()) : report.json());
  } else {
    fmt::print("agentd-bench: {}\n{}\n\n{}", report.command, report.environment, report.table());
    if (comparison) fmt::print("\n{}", comparison->table());
  }
  std::cout.flush();
  return status;
}
