// ServerStats: one snapshot of a server's counters, gathered on its loop thread by
// Server::stats() (server_stats.cpp), and its projections: the wire's ServerInfo
// (AgentServer.info, `agentctl info`), systemd's STATUS= line (status_text) and the Prometheus
// text of /metrics (render_metrics, metrics.h). A counter added here reaches all three through
// their projection functions; nothing else reads the server's parts for them.
#pragma once

#include <agentd/client.h>

#include "call_stats.h"
#include "counting_stream.h"
#include "model_registry.h"
#include "tool_registry.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace agentd::detail {

struct ServerStats {
  // The server and its process.
  std::string server_id;
  std::string version;
  std::int64_t pid = 0;
  double uptime_seconds = 0;
  std::uint64_t rss_bytes = 0;
  double cpu_seconds = 0;
  std::string advertise_address;           // "host:port" peers and agent references name (after listen())
  std::vector<std::string> classes;        // agent classes, sorted
  std::vector<std::string> model_configs;  // model config names, sorted
  std::uint64_t model_config_version = 0;
  // Agents and calls.
  std::uint64_t agents = 0;
  std::uint64_t calls_ok = 0;
  std::uint64_t calls_error = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> calls_by_class;  // {ok, error}
  std::uint64_t calls_queued = 0;
  std::uint64_t calls_running = 0;
  std::uint64_t calls_slow = 0;  // in progress past --slow-call-warn now
  std::uint64_t calls_slow_total = 0;
  std::uint64_t calls_timed_out = 0;
  // --agent-dir: times the Python host's asyncio loop went 2 s without running (an async Python
  // agent blocking it); -1 without the Python host.
  std::int64_t python_loop_stalls = -1;
  LatencyHistogram latency;
  // Results kept for placeholders, and those fetched from other servers.
  std::uint64_t result_pool_size = 0;
  std::uint64_t result_pool_evictions = 0;
  std::uint64_t max_pool_size = 0;  // --max-pool-size
  double max_expire_seconds = 0;    // --max-expire-time
  std::uint64_t peer_fetches = 0;
  // Model calls of all agents.
  std::uint64_t model_calls = 0;
  std::uint64_t model_errors = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::vector<ModelInfo> models;  // each config, sorted by name, with its usage
  // MCP tool calls: a row per server (tool empty) and per tool called so far.
  std::vector<ToolMetrics> tools;
  Traffic bytes;
  // Worker threads.
  std::uint64_t workers = 0;
  std::uint64_t workers_busy = 0;  // worker threads in a call (running or blocked in agent code)
  std::uint64_t workers_max = 0;   // --max-workers
  // Synchronous lanes: open now, the most (--lane-threads), calls answered, lanes refused (all
  // taken).
  std::uint64_t lanes_open = 0;
  std::uint64_t lane_threads = 0;
  std::uint64_t lane_calls = 0;
  std::uint64_t lanes_refused = 0;
  // --state-dir (empty: none), the database on disk, the last commit, why saving stopped.
  std::string state_dir;
  std::uint64_t state_bytes = 0;
  std::int64_t state_last_commit_unix_ms = 0;
  std::string state_error;
  // Security: clients need a token (--auth-token-file); the TCP listener speaks TLS.
  bool auth_required = false;
  bool tls = false;
};

// What AgentServer.info answers.
ServerInfo to_server_info(const ServerStats& s);

// "N agent(s), N running, N queued, N completed, N failed call(s), workers B/M busy[, S slow
// call(s) (over --slow-call-warn)]": for STATUS= and logs.
std::string status_text(const ServerStats& s);

}  // namespace agentd::detail
