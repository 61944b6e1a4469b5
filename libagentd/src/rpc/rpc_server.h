// The Cap'n Proto face of a server: AgentServer, Agent and Result implementations.
// Loop thread only. They translate wire requests into AgentHost operations and
// never run agent code.
#pragma once

#include <agentd/client.h>

#include "agentd.capnp.h"

#include <kj/async.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace agentd::detail {

class AgentHost;
class PeerPool;

// What the RPC objects borrow from the server that owns them; everything outlives them.
struct RpcContext {
  std::string server_id;
  AgentHost& host;
  PeerPool& peers;
  // AgentServer.info: the server's stats as the wire reports them (server/server_stats.h).
  std::function<ServerInfo()> server_info;
  std::function<void()> request_stop;                                       // the stop RPC
  std::function<std::uint64_t(const std::string& yaml)> set_model_configs;  // throws Error
  // AgentServer.listTools / callTool: the server's tool registry (empty: no tools).
  std::function<kj::Promise<std::vector<ToolServerInfo>>(bool start)> list_tools;
  std::function<kj::Promise<ToolResult>(std::string server, std::string tool, Value args,
                                        std::optional<std::chrono::milliseconds> timeout)>
      call_tool;
  // What one client may leave unread: completions queued for it or sent and not yet answered
  // (bytes, about). Past it the connection is closed through close_connection.
  std::size_t client_backlog_limit = std::size_t{1} << 30;
  // The largest call or answer one message may carry (--max-message-bytes): a bigger call or
  // answer fails alone with too_large. At most Cap'n Proto's limit (kMaxMessageBytes).
  std::size_t max_message_bytes = std::size_t{64} << 20;
  // Closes the connection this context serves, saying why (logged once). Set per connection by
  // the server; empty (nothing to close) for local mode's in-process use.
  std::function<void(const std::string& why)> close_connection;
};

// The bootstrap capability of a server. on_fetch (may be empty) runs on the first fetch call:
// only peer servers call fetch, so the server then counts that connection as a peer's.
// Connections reach it only through their Gate's login (secure/login_gate.h).
wire::AgentServer::Client make_agent_server(RpcContext& ctx, std::function<void()> on_fetch = {});

}  // namespace agentd::detail
