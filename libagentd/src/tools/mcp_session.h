// McpSession: the MCP client protocol over one transport (JSON-RPC 2.0): the initialize
// handshake with version negotiation, tools/list with pagination, tools/call, ping,
// notifications/cancelled for abandoned calls, notifications/tools/list_changed.
//
// Versions: it asks for 2025-11-25 and accepts a server's answer of 2025-11-25, 2025-06-18,
// 2025-03-26 or 2024-11-05 (kProtocolVersions); any other answer fails initialize() naming both.
// It declares no client capabilities (no roots, sampling or elicitation: it implements none), and
// answers a server's requests with JSON-RPC error -32601 (ping excepted: it answers ping).
//
// Many calls may be in flight at once (each request has its own id). Dropping a call's promise
// sends notifications/cancelled for it. When the transport closes, every pending promise rejects
// with Error(tool_error, retryable) "tool server 'NAME' ... : why".
//
// Lifetime: the session may be destroyed with promises of it still held (their continuations
// queued): they then reject with Error(tool_error, retryable) and touch nothing of it. Tool lists
// are capped at 10,000 tools; notifications/message is logged at most ~20 lines a second.
//
// Threading: loop thread only.
#pragma once

#include <agentd/tool.h>
#include <agentd/value.h>

#include <kj/async.h>
#include <kj/timer.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "mcp_transport.h"
#include "tool_config.h"

namespace agentd::detail {

inline constexpr std::array<const char*, 4> kProtocolVersions = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                                 "2024-11-05"};

class McpSession {
 public:
  // transport: not started yet; the session starts it. config: borrowed, outlives the session.
  McpSession(const ToolServerConfig& config, kj::Own<McpTransport> transport, kj::Timer& timer);
  ~McpSession();

  // Starts the transport and runs the handshake within config.start_timeout. Rejects with
  // Error(tool_error) naming the server and what failed.
  kj::Promise<void> initialize();
  // Every page of tools/list (the config's allow_tools applied), each ToolInfo's server set.
  kj::Promise<std::vector<ToolInfo>> list_tools();
  // tools/call; rejects with Error(timeout) after `timeout` (sending notifications/cancelled),
  // Error(tool_error) for a JSON-RPC error answer (its message and code), an unknown tool, a
  // result that is not a CallToolResult.
  kj::Promise<ToolResult> call_tool(const std::string& tool, const Value& arguments, kj::Duration timeout);
  kj::Promise<void> ping(kj::Duration timeout);

  // Called (loop thread) on notifications/tools/list_changed.
  void on_tools_changed(std::function<void()> fn);
  // Called once when the transport closes (after pending calls were rejected).
  void on_closed(std::function<void(std::string why)> fn);

  bool open() const;
  const std::string& protocol_version() const;
  const std::string& server_name() const;     // serverInfo.name
  const std::string& server_version() const;  // serverInfo.version
  std::size_t in_flight() const;              // requests sent and not yet answered
  // Why it is no longer open (the transport's closed reason, "shut down"); empty while open.
  const std::string& close_reason() const;
  McpTransport& transport();

  kj::Promise<void> shut_down(kj::Duration grace);

 private:
  struct Impl;
  kj::Own<Impl> impl_;
};

}  // namespace agentd::detail
