#include <agentd/agent.h>

#include <agentd/error.h>

#include "agent_services.h"
#include "models/model_registry.h"

namespace agentd {

namespace detail {

std::shared_ptr<ChatModel> AgentServices::model(const std::string& config_name,
                                                const std::string& agent_id) {
  auto model = models_.get(config_name);  // throws naming the known configs
  return with_usage_counters(std::move(model), {usage_counter(agent_id)});
}

std::shared_ptr<UsageCounter> AgentServices::usage_counter(const std::string& agent_id) {
  std::lock_guard lock(usage_mu_);
  auto& c = usage_[agent_id];
  if (!c) c = std::make_shared<UsageCounter>();
  return c;
}

ModelUsage AgentServices::agent_usage(const std::string& agent_id) const {
  std::lock_guard lock(usage_mu_);
  auto it = usage_.find(agent_id);
  return it == usage_.end() ? ModelUsage{} : it->second->snapshot();
}

void AgentServices::forget_agent(const std::string& agent_id) {
  std::lock_guard lock(usage_mu_);
  usage_.erase(agent_id);
}

Client& AgentServices::client_for(const std::string& host, std::uint16_t port) {
  std::string key = host + ":" + std::to_string(port);
  std::lock_guard lock(mu_);
  auto it = clients_.find(key);
  if (it != clients_.end()) return *it->second;
  auto client = std::make_unique<Client>(Client::connect(host, port));
  return *clients_.emplace(std::move(key), std::move(client)).first->second;
}

void AgentServices::close_clients() {
  std::map<std::string, std::unique_ptr<Client>> clients;
  {
    std::lock_guard lock(mu_);
    clients.swap(clients_);
  }
}

}  // namespace detail

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

void Agent::register_method(std::string name, Method fn) { methods_[std::move(name)] = std::move(fn); }

}  // namespace agentd
