// A tiny MCP tool server over stdio for W16 (`agentd-bench --serve-mcp-echo`), and the bare
// JSON-RPC client W16's baseline drives it with.
//
// The server reads newline-delimited JSON-RPC 2.0 from stdin and answers on stdout (MCP's stdio
// transport): initialize, ping, tools/list and tools/call, with two tools:
//   echo   {"message": string}  answers the message as one text block
//   sleep  {"ms": integer >= 0} answers "slept MS ms" after that many milliseconds
// Sleeps wait in a deadline queue of the same single-threaded poll loop, so a thousand of them
// at once cost no thread and do not hold up other requests; notifications/cancelled drops a
// waiting sleep unanswered. Every other notification is ignored, an unknown method gets -32601.
// It exits when stdin closes (what an MCP client does to stop a stdio server), or on a line it
// cannot parse (with a message on stderr).
#pragma once

#include "subprocess.h"

#include <agentd/value.h>

#include <cstdint>
#include <string>

namespace agentd::bench {

// Serves stdin/stdout until stdin closes; returns the exit status (0, or 1 after a bad line).
int serve_mcp_echo();

// W16's baseline: `program --serve-mcp-echo` as a child with pipes, initialized, then called
// one request at a time with blocking writes and reads on the calling thread (no event loop: the
// bare cost of a JSON-RPC round trip over a pipe and the server's own work). One thread at a time.
class McpEchoChild {
 public:
  // Starts program (normally this executable) and does the initialize handshake. Throws
  // std::runtime_error when it does not start or answers something else.
  explicit McpEchoChild(const std::string& program);
  ~McpEchoChild();  // closes its stdin (it exits), then reaps it (SIGKILL after a second)
  McpEchoChild(const McpEchoChild&) = delete;
  McpEchoChild& operator=(const McpEchoChild&) = delete;

  // Sends a request and returns its answer's "result". Throws std::runtime_error for a JSON-RPC
  // error answer, an answer to another id, or the child closing its stdout.
  Value request(const std::string& method, const Value& params);

  // tools/call echo {"message": message}; checks the answer is that text.
  void call_echo(const std::string& message);

 private:
  void send(const Value& message);
  Value read_message();

  detail::Subprocess process_;
  std::int64_t next_id_ = 1;
  std::string buffer_;  // bytes read from its stdout, not yet a whole line
};

}  // namespace agentd::bench
