// The wire form of what a server says about itself and its agents: ServerInfo (AgentServer.info)
// and AgentInfo (Agent.info, AgentServer.listAgents / queryAgents). The server writes and the client reads
// through these pairs only, so a field added to one side is added to the other. Private to
// libagentd; any thread.
#pragma once

#include <agentd/client.h>

#include "agentd.capnp.h"

namespace agentd::detail {

void write_agent_info(const AgentInfo& a, wire::AgentInfo::Builder out);
AgentInfo read_agent_info(wire::AgentInfo::Reader in);

void write_histogram(const Histogram& h, wire::Histogram::Builder out);
Histogram read_histogram(wire::Histogram::Reader in);

void write_server_info(const ServerInfo& s, wire::ServerInfo::Builder out);
ServerInfo read_server_info(wire::ServerInfo::Reader in);

void write_tool_server_info(const ToolServerInfo& s, wire::ToolServerInfo::Builder out);
ToolServerInfo read_tool_server_info(wire::ToolServerInfo::Reader in);

}  // namespace agentd::detail
