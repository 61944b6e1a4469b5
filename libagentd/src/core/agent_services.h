// AgentServices: what the hosting server gives each agent (models, the agents it names by
// reference). The host and agents program against this interface; the server implements it
// (server/server_services.h), so nothing below the server depends on how it is done.
#pragma once

#include <agentd/client.h>
#include <agentd/model.h>
#include <agentd/value.h>

#include <functional>
#include <memory>
#include <string>

namespace agentd::detail {

class UsageCounter;  // models/model_registry.h

class AgentServices {
 public:
  virtual ~AgentServices() = default;

  // Thread-safe: agents call it on worker threads. A handle on config_name whose calls count
  // toward agent_id's usage and the config's. Throws Error(config_error) naming the known configs.
  virtual std::shared_ptr<ChatModel> model(const std::string& config_name,
                                           const std::string& agent_id) = 0;

  // Thread-safe: agent_id's own usage counter, created on first use. The host keeps it with the
  // agent so it can read the usage of each call without a lookup.
  virtual std::shared_ptr<UsageCounter> usage_counter(const std::string& agent_id) = 0;
  // Thread-safe: drops agent_id's usage counter (the host calls it when the agent is deleted).
  virtual void forget_agent(const std::string& agent_id) = 0;

  // Thread-safe: the agent that ref (AgentRef::to_value()) names, on this server or another.
  // Throws Error (bad_args for a ref naming no reachable server, disconnected).
  virtual AgentRef connect_agent(const Value& ref) = 0;
};

// How a server reaches the agents its agents name by reference. main() chooses it (as_server
// and local mode pass the client layer's pooled connector); a server without one refuses.
// TODO(perf): serve these through the server's peer connections (rpc/peer_pool.h) instead of a
// client connection, and its thread, per peer address.
using AgentConnector = std::function<AgentRef(const Value& ref)>;

}  // namespace agentd::detail
