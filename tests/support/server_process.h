// Test helpers: real as_server processes on loopback, temp dirs, and waiting on conditions with
// deadlines (never fixed sleeps).
#pragma once

#include "subprocess.h"

#include <agentd/client.h>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace agentd::test {

using namespace std::chrono_literals;

// Paths of what the tests run (from the build, see tests/support/CMakeLists.txt).
inline std::string as_server_path() { return AGENTD_AS_SERVER_BINARY; }
inline std::string echo_plugin() { return AGENTD_ECHO_PLUGIN; }
inline std::string web_plugin() { return AGENTD_WEB_PLUGIN; }
inline std::string async_plugin() { return AGENTD_ASYNC_PLUGIN; }
inline std::string test_agents_plugin() { return AGENTD_TEST_AGENTS_PLUGIN; }

// --port 0, the echo and test-agents plugins, quiet logs: what most tests start a server with.
std::vector<std::string> standard_args(std::vector<std::string> extra = {});
// The same on a given port.
std::vector<std::string> standard_args_on_port(std::uint16_t port, std::vector<std::string> extra = {});

// Polls pred (every few ms) until it holds or timeout passes. Returns its last value.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// A port nothing listens on right now (bound to port 0, then closed; to keep it from other
// tests' servers, hold a PortReservation instead).
std::uint16_t unused_port();
// True when a TCP connection to 127.0.0.1:port is accepted.
bool can_connect(std::uint16_t port);

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes text to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
};

// What a process that ran to its end left behind.
struct ExitResult {
  int exit_code = -1;   // WEXITSTATUS, or -1 when killed by a signal
  int term_signal = 0;  // the signal that killed it, if any
  std::string out;      // its stdout
  std::string err;      // its stderr
};

// Runs as_server with args to its end (killing it, and failing, after timeout).
ExitResult run_as_server(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 30s);

// A running as_server started by the test. Destruction kills it (SIGKILL) if it still runs.
class ServerProcess {
 public:
  // Starts as_server with args and waits for its ready line. Throws std::runtime_error (with
  // the server's stderr) when it exits first or prints nothing within timeout.
  static std::unique_ptr<ServerProcess> start(const std::vector<std::string>& args,
                                              std::chrono::milliseconds timeout = 30s);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const { return process_.pid(); }
  std::uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }
  const std::string& server_id() const { return server_id_; }
  const std::string& ready_line() const { return ready_line_; }

  Client connect(ClientOptions options = {}) const;

  // Sends sig; returns the exit result once it has exited (throws after timeout).
  ExitResult signal_and_wait(int sig, std::chrono::milliseconds timeout = 30s);
  // Waits for the process to exit on its own (throws after timeout).
  ExitResult wait_exit(std::chrono::milliseconds timeout = 30s);
  // SIGKILL and reap.
  void kill_now();
  bool running();

  std::string stderr_text() const;

 private:
  ServerProcess() = default;
  detail::Subprocess process_;  // owns the server and the read end of its stdout
  std::string err_path_;
  std::string out_seen_;
  std::uint16_t port_ = 0;
  std::string host_;
  std::string server_id_;
  std::string ready_line_;
  std::unique_ptr<ExitResult> exited_;
};

// A server with standard_args_on_port(port, extra) where one was just killed: tried again
// while the port is not yet free, until timeout (then the last error is thrown: the port still
// in use, or start()'s). The port is
// held (a PortReservation, loopback.h) while the server starts, so that no other test's server
// is given it; call this at once after the kill, which leaves the port free for a moment.
std::unique_ptr<ServerProcess> restart_on(std::uint16_t port, std::vector<std::string> extra = {},
                                          std::chrono::milliseconds timeout = 20s);

// True while a process with this pid exists and is not a zombie.
bool process_alive(pid_t pid);

}  // namespace agentd::test
