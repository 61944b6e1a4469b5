// ChildProcess: an as_server started by this process (child mode). The child's stdin is a pipe
// this process holds open; when this process dies, the pipe closes and the child stops
// (as_server --stop-on-stdin-eof), so children never outlive their parent.
#pragma once

#include "subprocess.h"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {

class ChildProcess {
 public:
  // Starts binary with args (plus --host 127.0.0.1 --port 0 --stop-on-stdin-eof) and waits
  // for its ready line. Throws Error naming the binary and what went wrong (not found, exited
  // with status N, no ready line within timeout). stderr_path, when given, is the file the
  // child's stderr is appended to (else it shares this process's stderr); stderr_tail() reads it.
  static std::unique_ptr<ChildProcess> start(const std::string& binary,
                                             const std::vector<std::string>& args,
                                             std::chrono::milliseconds timeout,
                                             std::string stderr_path = {});

  // Where to find as_server when the caller did not say (see ChildOptions::server_path).
  static std::string find_server_binary(const std::string& configured);

  ~ChildProcess();  // stop(5 s)
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // SIGTERM, wait up to grace, then SIGKILL. Idempotent.
  void stop(std::chrono::milliseconds grace);

  pid_t pid() const { return process_.reaped() ? -1 : process_.pid(); }  // -1 once stopped
  pid_t started_pid() const { return process_.pid(); }  // also once stopped
  // Its wait status once it has exited (reaping it), else nullopt. Does not block. One thread
  // at a time (the client's loop thread while it runs, the core's owner after).
  std::optional<int> exit_status() { return process_.try_wait(); }
  // The last max_lines lines of its stderr file (start's stderr_path), joined by newlines;
  // empty when there is none or it is empty.
  std::string stderr_tail(std::size_t max_lines) const;
  std::uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }
  const std::string& server_id() const { return server_id_; }

 private:
  explicit ChildProcess(Subprocess process) : process_(std::move(process)) {}
  // Owns the child; its pipes: the write end of the child's stdin, the read end of its stdout.
  Subprocess process_;
  std::uint16_t port_ = 0;
  std::string host_;
  std::string server_id_;
  std::string stderr_path_;
};

// Splits "host:port" (the port a whole number 1..65535). False when address is not that.
bool split_host_port(std::string_view address, std::string& host, std::uint16_t& port);

// Parses as_server's ready line ("as_server ready: listening on HOST:PORT server_id=ID pid=PID").
// Returns false when line is not one.
bool parse_ready_line(const std::string& line, std::string& host, std::uint16_t& port,
                      std::string& server_id);

}  // namespace agentd::detail
