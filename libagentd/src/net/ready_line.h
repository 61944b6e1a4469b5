// as_server's ready line ("as_server ready: listening on HOST:PORT server_id=ID pid=PID", on
// stdout once it listens), and the one wait for it that child mode, agentctl and the tests use.
#pragma once

#include "endpoint.h"
#include "subprocess.h"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace agentd::net {

struct ReadyLine {
  Endpoint endpoint;
  std::string server_id;  // empty when the line names none
};

// The ready line in line (anywhere in it); nullopt when line is not one.
std::optional<ReadyLine> parse_ready_line(std::string_view line);

// How a wait for the ready line ended.
struct ReadyWait {
  enum class Outcome {
    ready,      // ready and line are set
    closed,     // its stdout ended first (it is exiting)
    exited,     // it exited first; status is set
    timed_out,  // no ready line within the timeout
  };
  Outcome outcome = Outcome::timed_out;
  std::optional<ReadyLine> ready;
  std::string line;  // the ready line as printed
  std::optional<int> status;
};

// Reads process's stdout (a pipe) line by line until the ready line, the end of its stdout, its
// exit or timeout, whichever comes first. seen (may be null) gets everything read from stdout.
// Throws Error(internal) when the pipe cannot be polled. Leaves the process running.
ReadyWait wait_ready_line(detail::Subprocess& process, std::chrono::milliseconds timeout,
                          std::string* seen = nullptr);

}  // namespace agentd::net
