#include <agentd/agent.h>

#include <agentd/error.h>

#include "agent_services.h"

namespace agentd {


Agent::Agent(AgentInit init) : init_(std::move(init)) {}

Agent::~Agent() = default;

void Agent::observe(const Msg& x) { memory_.add(x); }

Value Agent::call(const std::string& method, const Value& args) {
  auto it = methods_.find(method);
  if (it == methods_.end()) {
    std::string known;
    for (const auto& [n, _] : methods_) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::unknown_method,
                "no method '" + method + "'; known methods: " + (known.empty() ? "(none)" : known),
                id(), class_name());
  }
  return it->second(args);
}

std::shared_ptr<ChatModel> Agent::model(const std::string& config_name) {
  if (init_.services == nullptr)
    throw Error(ErrorCode::config_error, "this agent is not hosted by a server; no models", id(),
                class_name());
  return init_.services->model(config_name, id());
}

std::vector<std::string> Agent::method_names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : methods_) out.push_back(n);
  return out;
}

void Agent::emit_chunk(std::string_view text) {
  if (chunk_sink_ && !text.empty()) chunk_sink_(text);
}

void Agent::register_method(std::string name, Method fn) { methods_[std::move(name)] = std::move(fn); }

}  // namespace agentd
