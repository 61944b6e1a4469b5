#include "server_services.h"

#include <agentd/error.h>

namespace agentd::detail {

std::shared_ptr<ChatModel> ServerServices::model(const std::string& config_name,
                                                 const std::string& agent_id) {
  auto model = models_.get(config_name);  // throws naming the known configs
  return with_usage_counters(std::move(model), {usage_counter(agent_id)});
}

std::shared_ptr<UsageCounter> ServerServices::usage_counter(const std::string& agent_id) {
  std::lock_guard lock(usage_mu_);
  auto& c = usage_[agent_id];
  if (!c) c = std::make_shared<UsageCounter>();
  return c;
}

void ServerServices::set_tools(std::shared_ptr<ToolRegistryHandle> tools) {
  std::lock_guard lock(connector_mu_);
  tools_ = std::move(tools);
}

std::shared_ptr<Tools> ServerServices::tools(const std::string& agent_id) {
  std::shared_ptr<ToolRegistryHandle> registry;
  {
    std::lock_guard lock(connector_mu_);
    registry = tools_;
  }
  std::weak_ptr<UsageCounter> counter = usage_counter(agent_id);
  return make_agent_tools(std::move(registry), [counter](const ToolCallSpan& span) {
    if (auto c = counter.lock()) c->record_tool(span);
  });
}

ModelUsage ServerServices::agent_usage(const std::string& agent_id) const {
  std::lock_guard lock(usage_mu_);
  auto it = usage_.find(agent_id);
  return it == usage_.end() ? ModelUsage{} : it->second->snapshot();
}

void ServerServices::forget_agent(const std::string& agent_id) {
  std::lock_guard lock(usage_mu_);
  usage_.erase(agent_id);
}

std::shared_ptr<AgentLink> ServerServices::link_to(const std::string& host, std::uint16_t port,
                                                   const std::string& server_id) {
  AgentConnector connector;
  {
    std::lock_guard lock(connector_mu_);
    connector = connector_;
  }
  if (!connector)
    throw Error(ErrorCode::bad_args, "this server has no way to reach other agents by reference");
  return connector(host, port, server_id);
}

void ServerServices::set_connector(AgentConnector connector) {
  std::lock_guard lock(connector_mu_);
  connector_ = std::move(connector);
}

ServerServices::UsageMap ServerServices::take_usage() {
  std::lock_guard lock(usage_mu_);
  UsageMap out;
  out.swap(usage_);
  return out;
}

void ServerServices::close() {
  AgentConnector connector;
  std::lock_guard lock(connector_mu_);
  connector.swap(connector_);
}

}  // namespace agentd::detail
