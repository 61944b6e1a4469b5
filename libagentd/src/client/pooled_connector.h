// The client layer's way for a server to reach agents named by reference: a client connection
// per server address, shared by the server's agents (see AgentConnector in agent_services.h).
#pragma once

#include "agent_services.h"

namespace agentd::detail {

// Thread-safe; connections open on first use and close when the last copy of it goes.
AgentConnector pooled_agent_connector();

}  // namespace agentd::detail
