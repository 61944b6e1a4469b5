// Local development servers for `agentctl up N` / `agentctl down`: as_server processes started
// detached (their own session, stdin /dev/null, stdout+stderr to a log file) and recorded in a
// state file, so a later agentctl can find and stop them; with `--gateway`, also an
// agentd-gateway in front of them, started and recorded the same way.
//
// State directory: $AGENTD_STATE_DIR, else $XDG_RUNTIME_DIR/agentd, else /tmp/agentd-$UID (0700).
// The state file (servers.json) is read and rewritten under an exclusive flock on `lock` there.
#pragma once

#include <agentd/value.h>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace agentctl {

struct LocalServer {
  static constexpr const char* kServer = "as_server";
  static constexpr const char* kGateway = "agentd-gateway";

  std::string kind = kServer;  // kServer, or kGateway (then server_id is empty and url is set)
  pid_t pid = 0;
  std::string host;
  std::uint16_t port = 0;
  std::string server_id;
  std::string log_path;
  std::string binary;
  std::string url;              // a gateway's: http://HOST:PORT or https://HOST:PORT
  std::int64_t started_at = 0;  // unix seconds
  bool alive = true;            // as recorded() found it (not stored)

  std::string address() const;
  agentd::Value to_json() const;
  static LocalServer from_json(const agentd::Value& v);
};

struct UpOptions {
  int count = 1;
  std::string host = "127.0.0.1";
  std::string server_path;  // empty: as ChildOptions::server_path
  std::vector<std::string> plugins;
  std::vector<std::string> plugin_dirs;
  std::vector<std::string> agent_dirs;  // --agent-dir: Python agent classes
  std::string model_config_path;
  std::vector<std::string> extra_args;  // passed to each as_server as given
  std::chrono::milliseconds timeout{30000};
  // Non-empty: also start agentd-gateway listening on this HOST:PORT (port 0: a free port), in
  // front of the servers started (--server for one, --cluster for several).
  std::string gateway_listen;
  std::string gateway_path;                     // empty: find_gateway_binary's search
  std::vector<std::string> gateway_extra_args;  // passed to agentd-gateway as given
};

// Thrown for local failures (cannot start a server, unusable state directory); exit code 1.
struct LocalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Writes text to path through a temporary file renamed over it (readers never see half a
// file). Throws LocalError naming the file.
void write_file_atomically(const std::string& path, const std::string& text);

// The state directory (created 0700 if missing). Throws LocalError when it is unusable.
std::string state_dir();

// The agentd-gateway binary: configured if given, else $AGENTD_GATEWAY, else the one beside this
// program (agentctl), else the first on $PATH. Throws LocalError naming the places looked at.
std::string find_gateway_binary(const std::string& configured);

// Starts opts.count servers, waits until each printed its ready line, then (with
// gateway_listen) the gateway in front of them, records them and returns them (the servers,
// then the gateway). When one fails, the ones started by this call are stopped and LocalError
// says why (with the tail of its log).
std::vector<LocalServer> up(const UpOptions& opts);

// The recorded servers, each with alive set: those that died stay recorded (and shown as dead)
// until `down`.
std::vector<LocalServer> recorded();

// SIGTERM to every recorded server (gateways included), waits up to grace for them to exit,
// then SIGKILL.
// Returns the servers it stopped and forgets every recorded one; their logs stay in the state
// directory unless remove_logs.
std::vector<LocalServer> down(std::chrono::milliseconds grace, bool remove_logs);

}  // namespace agentctl
