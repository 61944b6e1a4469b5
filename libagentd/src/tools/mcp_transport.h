// McpTransport: moves JSON-RPC messages to and from one MCP server, on a KJ event loop.
//   stdio  the server is a child process (core/subprocess); messages are newline-delimited JSON
//          on its stdin and stdout; each line of its stderr goes to the log under its name.
//   http   Streamable HTTP (http/async_http): each message is POSTed; the answer is JSON or a
//          server-sent-event stream of messages; Mcp-Session-Id and MCP-Protocol-Version are
//          kept and sent back.
// Threading: loop thread only (construct, use and destroy it there). The Events callbacks run
// from the transport's own tasks: they may send(), but must not destroy the transport (defer
// that to a later turn of the loop).
// http: a failure of one request (an HTTP error status, a broken transfer, an answer over
// max_message_bytes, a stream that ended early) arrives as a JSON-RPC error response to its id;
// closed() means the server cannot be reached or ended the session (404). shut_down() does not
// call closed().
#pragma once

#include <agentd/value.h>

#include <kj/async-io.h>
#include <kj/async.h>

#include <cstddef>
#include <functional>
#include <string>

#include "tool_config.h"

namespace agentd::detail {

class AsyncHttp;

class McpTransport {
 public:
  struct Events {
    // Each message the server sends (a response, a request or a notification), in order.
    std::function<void(Value message)> message;
    // The transport is gone for good (the child exited, its stdout closed, it sent a line that
    // is not JSON or longer than max_message_bytes, the HTTP session ended): why, for the
    // operator ("exited with status 1; its last stderr line: ..."). Called at most once; no
    // message follows it.
    std::function<void(std::string why)> closed;
  };

  virtual ~McpTransport() = default;  // stops the server: the child is killed and reaped

  // Starts it (spawns the child; nothing for http). Throws Error(tool_error) when it cannot
  // (the program is not found: the message names it and the PATH searched).
  virtual void start(Events events) = 0;
  // Sends one message (in order). Failures arrive through Events::closed.
  virtual void send(const Value& message) = 0;
  // http: the protocol version agreed on, sent as MCP-Protocol-Version from now on.
  virtual void set_protocol_version(const std::string& version) { (void)version; }
  // Ends it politely: http DELETEs its session; stdio closes the child's stdin, waits up to
  // grace for it to exit, then SIGTERM, then SIGKILL (its whole process group).
  virtual kj::Promise<void> shut_down(kj::Duration grace) = 0;
  // The child's pid (stdio, running), else 0.
  virtual int pid() const { return 0; }
};

kj::Own<McpTransport> make_stdio_transport(const ToolServerConfig& config, kj::AsyncIoContext& io);
kj::Own<McpTransport> make_http_transport(const ToolServerConfig& config, AsyncHttp& http, kj::Timer& timer);

}  // namespace agentd::detail
