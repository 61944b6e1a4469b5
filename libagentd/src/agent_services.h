// What the hosting server gives each agent: models today; the place for more shared services.
#pragma once

#include <agentd/model.h>

#include <memory>
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

 private:
  ModelRegistry& models_;
};

}  // namespace agentd::detail
