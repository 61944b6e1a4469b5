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

class AgentServices {
 public:
  // models is borrowed and must outlive every agent that uses these services.
  explicit AgentServices(ModelRegistry& models) : models_(models) {}

  // Thread-safe: called from agents on worker threads.
  std::shared_ptr<ChatModel> model(const std::string& config_name);

  ModelRegistry& models() { return models_; }

  // Thread-safe: a client connection to the server at address ("host:port"), opened on first use
  // and shared by every agent here. Throws Error(disconnected) when it cannot connect.
  Client& client_for(const std::string& address);

  // Closes the shared connections (before the server goes away).
  void close_clients();

 private:
  ModelRegistry& models_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Client>> clients_;
};

}  // namespace agentd::detail
