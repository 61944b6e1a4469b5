// as_server's options: command line (Boost.Program_options) over an optional YAML file
// (--config) that uses the same keys as the long options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace agentd::detail {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 12310;                   // 0: pick a free port
  std::string advertise_address;      // what peers and clients use; default host:port
  std::string model_config_path;      // empty: only the built-in echo model
  std::vector<std::string> plugins;
  std::vector<std::string> plugin_dirs;
  std::size_t max_workers = 1024;     // upper bound of agent worker threads
  std::size_t max_pool_size = 8192;   // finished results kept
  double max_expire_time = 7200;      // seconds a finished result is kept
  std::string server_id;              // default: generated
  std::string log_level = "info";
  std::string log_format = "text";    // text, or json: one JSON object per line
  int metrics_port = 0;               // Prometheus /metrics on host:port; 0: off
  std::string trace_file;             // append one OpenTelemetry JSON line per call; empty: off
  double shutdown_grace = 10;         // seconds running calls get to finish on SIGTERM
  bool stop_on_stdin_eof = false;     // child mode: the parent holds our stdin
  double peer_connect_timeout = 10;   // seconds to connect to another server for a placeholder
  double peer_fetch_timeout = 7200;   // seconds to wait for another server's result
  std::size_t max_client_backlog_mb = 1024;  // completions one client may leave unread (MiB)
  std::string config_file;
};

struct ParsedArgs {
  enum class Action { run, help, version } action = Action::run;
  ServerOptions options;
  std::string text;  // --help / --version output
};

// Throws agentd::Error(config_error) with a message naming the bad option, value or file
// position (unknown option, bad value, unreadable --config, unknown key in it).
ParsedArgs parse_server_args(int argc, const char* const* argv);

}  // namespace agentd::detail
