// ServerServices: the server's implementation of AgentServices (models from its registry, usage
// per agent, agents named by reference through the connector main() gave it).
#pragma once

#include "agent_services.h"
#include "model_registry.h"
#include "tool_registry.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace agentd::detail {

class ServerServices final : public AgentServices {
 public:
  // models is borrowed and must outlive every agent that uses these services. Until
  // set_connector(), link_to() fails with bad_args.
  explicit ServerServices(ModelRegistry& models) : models_(models) {}

  // Loop thread, before agents run.
  void set_connector(AgentConnector connector);
  // Any thread: the tool servers agents reach (null: none configured).
  void set_tools(std::shared_ptr<ToolRegistryHandle> tools);

  std::shared_ptr<ChatModel> model(const std::string& config_name, const std::string& agent_id) override;
  std::shared_ptr<UsageCounter> usage_counter(const std::string& agent_id) override;
  std::shared_ptr<Tools> tools(const std::string& agent_id) override;
  void forget_agent(const std::string& agent_id) override;
  std::shared_ptr<AgentLink> link_to(const std::string& host, std::uint16_t port,
                                     const std::string& server_id) override;

  // Thread-safe: the model usage of agent_id's calls so far (zeros when it made none).
  ModelUsage agent_usage(const std::string& agent_id) const;

  // Loop thread: drops the connector and the connections it holds (before the server's peer
  // connections and loop go away). Agents must not run any more.
  void close();

  using UsageMap = std::unordered_map<std::string, std::shared_ptr<UsageCounter>>;
  // The server's exit: hands over every agent's usage counter (a million of them take a while to
  // free, better beside the agents' destructors than after them). Thread-safe.
  UsageMap take_usage();

 private:
  ModelRegistry& models_;
  std::mutex connector_mu_;  // guards connector_
  AgentConnector connector_;
  std::shared_ptr<ToolRegistryHandle> tools_;  // guarded by connector_mu_
  mutable std::mutex usage_mu_;                // guards usage_
  // By agent id. Hashed: a million agents' deletions each cost a search (a tree of long string
  // keys took microseconds per search, seconds in all).
  UsageMap usage_;
};

}  // namespace agentd::detail
