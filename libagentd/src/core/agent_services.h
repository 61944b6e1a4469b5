// AgentServices: what the hosting server gives each agent (models, a way to the agents it names
// by reference). The host and agents program against this interface; the server implements it
// (server/server_services.h), so nothing below the server depends on how it is done.
// AgentLink: a link to another server's agents, opaque here: the client layer defines the one
// kind (client_core.h's ClientLink) and reads it (connect_agent), so core names no client type.
#pragma once

#include <agentd/model.h>
#include <agentd/tool.h>
#include <agentd/value.h>

#include <functional>
#include <memory>
#include <string>

namespace agentd::detail {

class UsageCounter;  // models/model_registry.h

// A connection this server's agents share to one server (made by the connector main() chooses:
// local/pooled_connector.h). Thread-safe to hold and drop.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
};

class AgentServices {
 public:
  virtual ~AgentServices() = default;

  // Thread-safe: agents call it on worker threads. A handle on config_name whose calls count
  // toward agent_id's usage and the config's. Throws Error(config_error) naming the known configs.
  virtual std::shared_ptr<ChatModel> model(const std::string& config_name, const std::string& agent_id) = 0;

  // Thread-safe: the tools of the server's MCP tool servers for agent agent_id, whose calls are
  // recorded in that agent's running call's span (through its usage counter).
  virtual std::shared_ptr<Tools> tools(const std::string& agent_id) = 0;

  // Thread-safe: agent_id's own usage counter, created on first use. The host keeps it with the
  // agent so it can read the usage of each call without a lookup.
  virtual std::shared_ptr<UsageCounter> usage_counter(const std::string& agent_id) = 0;
  // Thread-safe: drops agent_id's usage counter (the host calls it when the agent is deleted).
  virtual void forget_agent(const std::string& agent_id) = 0;

  // Thread-safe (agent code, on workers): the client connection this server's agents share to
  // the server at host:port, whose id is server_id (empty: not known). connect_agent() builds
  // agent references on it. Throws Error (bad_args when this server cannot reach other agents,
  // disconnected).
  virtual std::shared_ptr<AgentLink> link_to(const std::string& host, std::uint16_t port,
                                             const std::string& server_id) = 0;
};

// How a server reaches the servers its agents name by reference: link_to() as a function.
// main() chooses it (as_server and local mode pass local/pooled_connector.h's, which shares the
// server's own peer connections); a server without one refuses.
using AgentConnector = std::function<std::shared_ptr<AgentLink>(const std::string& host, std::uint16_t port,
                                                                const std::string& server_id)>;

}  // namespace agentd::detail
