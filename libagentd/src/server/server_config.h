// as_server's options: command line (Boost.Program_options) over an optional YAML file
// (--config) that uses the same keys as the long options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace agentd::detail {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 12310;               // 0: pick a free port
  std::string advertise_address;  // what peers and clients use; default host:port
  std::string model_config_path;  // empty: only the built-in echo model
  std::string tool_config_path;   // empty: no MCP tool servers
  std::vector<std::string> plugins;
  std::vector<std::string> plugin_dirs;
  std::vector<std::string> agent_dirs;  // folders of Python agent classes (libagentd_python.so)
  std::size_t max_workers = 1024;       // upper bound of agent worker threads
  std::size_t max_pool_size = 8192;     // finished results kept
  double max_expire_time = 7200;        // seconds a finished result is kept
  std::string server_id;                // default: generated
  std::string log_level = "info";
  std::string log_format = "text";  // text, or json: one JSON object per line
  int metrics_port = 0;             // Prometheus /metrics on host:port; 0: off
  std::string trace_file;           // append one OpenTelemetry JSON line per call; empty: off
  double shutdown_grace = 10;       // seconds running calls get to finish on SIGTERM
  bool stop_on_stdin_eof = false;   // child mode: the parent holds our stdin
  // Seconds an origin server that cannot be reached (refused, timing out, lost, frozen) is
  // tried again before its consumers fail `disconnected`, counted from the first failure.
  double peer_connect_timeout = 60;
  // Seconds a consumer waits for a result its reachable origin is still computing.
  double peer_fetch_timeout = 7200;
  std::size_t max_client_backlog_mb = 1024;  // completions one client may leave unread (MiB)
  // The largest call or answer one Cap'n Proto message may carry (bytes): Cap'n Proto's own
  // single-message limit by default, and never more.
  std::size_t max_message_bytes = std::size_t{64} << 20;
  std::size_t max_agents = 2000000;                 // agents at once; 0: no limit
  std::size_t max_queued_calls = 2000000;           // calls waiting or running, whole server
  std::size_t max_queued_calls_per_agent = 100000;  // calls waiting or running, one agent
  // Call deadlines (seconds after the server queued the call; 0: none): the default, and by
  // agent class ("CLASS=SECONDS" options, parsed into class_call_timeouts).
  double call_timeout = 0;
  std::vector<std::string> class_call_timeout_args;
  std::map<std::string, double> class_call_timeouts;
  double slow_call_warn = 60;  // log (once) calls in progress this long; 0: never
  // Durable agents (README "Durability"): the state store's directory (empty: memory only), and
  // whether restoring deletes agents of classes no plugin provides instead of refusing to start.
  std::string state_dir;
  bool drop_missing_classes = false;
  std::string config_file;
  // Security (README "Security"): tokens clients must log in with (empty: any token), the token
  // this server presents to peers (empty: the first of auth_token_file's), and the explicit
  // opt-out of the protected default (no token while listening beyond loopback refuses to start).
  std::string auth_token_file;
  std::string peer_token_file;
  bool allow_unauthenticated = false;
  // Before login (README "Security"): a connection must have logged in this many seconds after
  // it was accepted (TLS handshake included), and at most this many connections may be waiting
  // to (admitting one more closes the one waiting longest).
  double login_timeout = 10;
  std::size_t max_unauthenticated_connections = 1024;
  // Synchronous lanes (README "The synchronous lane"): at most this many at once, each read by
  // a thread of its own that runs its blocking agents' calls itself; 0: none served. A lane with
  // no call for lane_idle_timeout seconds is closed, and its thread ends (its client opens it
  // again when it next needs it).
  std::size_t lane_threads = 64;
  double lane_idle_timeout = 30;
  // How long a lane's thread polls for its caller's next call after answering one before it
  // sleeps in read() (microseconds; 0: never). Adaptive, and at most CPUs - 1 pollers at once
  // (README "Polling for the answer").
  std::int64_t lane_spin_us = 100;
  // TLS (PEM files): serve TLS only with tls_cert + tls_key; require client certificates signed
  // by tls_client_ca (mutual TLS). Peer connections use TLS when this server serves it, trusting
  // peer_tls_ca (default: tls_client_ca, else the system's CAs) and presenting tls_cert.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string peer_tls_ca;
  // A Unix domain socket to listen on as well (mode 0660; group unix_socket_group when set):
  // its file permissions are the access control (a token is still required when configured).
  std::string unix_socket;
  std::string unix_socket_group;
};

// True for addresses only this machine can reach: 127.0.0.0/8, ::1, localhost.
bool is_loopback_host(const std::string& host);

struct ParsedArgs {
  enum class Action { run, help, version } action = Action::run;
  ServerOptions options;
  std::string text;  // --help / --version output
};

// Throws agentd::Error(config_error) with a message naming the bad option, value or file
// position (unknown option, bad value, unreadable --config, unknown key in it).
ParsedArgs parse_server_args(int argc, const char* const* argv);

}  // namespace agentd::detail
