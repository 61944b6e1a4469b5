// ChildProcess: an as_server started by this process (child mode). The child's stdin is a pipe
// this process holds open; when this process dies, the pipe closes and the child stops
// (as_server --stop-on-stdin-eof), so children never outlive their parent.
#pragma once

#include "endpoint.h"
#include "subprocess.h"

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace agentd::detail {

class ChildProcess {
 public:
  // Starts binary with args (plus --host 127.0.0.1 --port 0 --stop-on-stdin-eof) and waits
  // for its ready line. Throws Error naming the binary and what went wrong (not found, exited
  // with status N, no ready line within timeout). keep_stderr: the child's stderr goes through
  // a pipe that a thread of this process copies to its own stderr (so the child's logs still
  // show) while keeping the last 16 KiB for stderr_tail(); else the child shares our stderr.
  static std::unique_ptr<ChildProcess> start(const std::string& binary, const std::vector<std::string>& args,
                                             std::chrono::milliseconds timeout, bool keep_stderr = false);

  // The as_server to start: configured when not empty, else $AGENTD_AS_SERVER, else the first
  // executable as_server in the bin directory of the tree libagentd was loaded from (found with
  // dladdr: a build tree, or an installed prefix wherever it was moved), beside the program
  // (/proc/self/exe), then on $PATH. Throws Error(config_error) listing every place it looked when none is
  // there.
  static std::string find_server_binary(const std::string& configured);

  ~ChildProcess();  // stop(5 s)
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // SIGTERM, wait up to grace, then SIGKILL. Idempotent.
  void stop(std::chrono::milliseconds grace);

  pid_t pid() const { return process_.reaped() ? -1 : process_.pid(); }  // -1 once stopped
  pid_t started_pid() const { return process_.pid(); }                   // also once stopped
  // Its wait status once it has exited (reaping it), else nullopt. Does not block. One thread
  // at a time (the client's loop thread while it runs, the core's owner after).
  std::optional<int> exit_status() { return process_.try_wait(); }
  // The last max_lines lines of its stderr (start's keep_stderr), joined by newlines; empty
  // when none was kept. wait: how long to wait for the end of its stderr first (a child that
  // has exited: the copying thread may still be reading its last words).
  std::string stderr_tail(std::size_t max_lines,
                          std::chrono::milliseconds wait = std::chrono::milliseconds(0)) const;
  const net::Endpoint& endpoint() const { return endpoint_; }  // where it listens
  std::uint16_t port() const { return endpoint_.port; }
  const std::string& host() const { return endpoint_.host; }
  const std::string& server_id() const { return server_id_; }

 private:
  explicit ChildProcess(Subprocess process) : process_(std::move(process)) {}
  // Owns the child; its pipes: the write end of the child's stdin, the read end of its stdout.
  Subprocess process_;
  net::Endpoint endpoint_;
  std::string server_id_;
  // After the ready line: the thread copying what the child prints on stdout (its agents' print
  // calls) to this process's stdout, so that a chatty agent never fills the pipe and blocks.
  void copy_stdout();
  std::thread stdout_copier_;
  std::atomic<bool> stdout_stop_{false};
  // keep_stderr: the thread copying the child's stderr, and the tail it keeps.
  void copy_stderr();
  std::thread stderr_copier_;
  mutable std::mutex tail_mu_;
  mutable std::condition_variable tail_end_;
  std::string tail_;
  bool tail_done_ = false;  // the child's stderr reached its end
};

}  // namespace agentd::detail
