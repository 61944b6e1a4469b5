// How a server's agents reach the agents they name by reference (AgentConnector in
// agent_services.h): one client connection per server address, shared by all of the server's
// agents, with no thread of its own. It lives on the server's loop and goes over the server's
// pooled peer connection to that address (the one placeholder fetches use), or, for agents on
// the same server, over the server's own bootstrap capability: no socket at all.
#pragma once

#include "agent_services.h"
#include "server.h"  // ConnectorFactory

namespace agentd::detail {

// What as_server's main() and local mode give their Server.
ConnectorFactory pooled_agent_connector();

}  // namespace agentd::detail
