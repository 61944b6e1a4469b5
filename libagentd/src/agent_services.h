// What the hosting server gives each agent: models today; the place for more shared services.
#pragma once

#include <agentd/client.h>
#include <agentd/model.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentd::detail {

class ModelRegistry;
class UsageCounter;
struct ModelUsage;

class AgentServices {
 public:
  // models is borrowed and must outlive every agent that uses these services.
  explicit AgentServices(ModelRegistry& models) : models_(models) {}

  // Thread-safe: called from agents on worker threads. The model records each call's usage in
  // the registry's per-config counter and in agent_id's own (see agent_usage()).
  std::shared_ptr<ChatModel> model(const std::string& config_name, const std::string& agent_id);

  // Thread-safe: agent_id's own usage counter, created on first use. The host keeps it with the
  // agent so it can read the usage of each call without a lookup.
  std::shared_ptr<UsageCounter> usage_counter(const std::string& agent_id);

  // Thread-safe: the model usage of agent_id's calls so far (zeros when it made none).
  ModelUsage agent_usage(const std::string& agent_id) const;
  // Drops agent_id's usage counter (the host calls it when the agent is deleted).
  void forget_agent(const std::string& agent_id);

  ModelRegistry& models() { return models_; }

  // Thread-safe: a client connection to the server at host:port, opened on first use and shared
  // by every agent here. Throws Error(disconnected) when it cannot connect.
  Client& client_for(const std::string& host, std::uint16_t port);

  // Closes the shared connections (before the server goes away).
  void close_clients();

 private:
  ModelRegistry& models_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Client>> clients_;
  mutable std::mutex usage_mu_;  // guards usage_
  std::map<std::string, std::shared_ptr<UsageCounter>, std::less<>> usage_;  // by agent id
};

}  // namespace agentd::detail
