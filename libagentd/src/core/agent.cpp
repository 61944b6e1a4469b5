#include <agentd/agent.h>

#include <agentd/error.h>

#include "agent_services.h"

#include <algorithm>

namespace agentd {

Agent::Agent(AgentInit init) : init_(std::move(init)) {}

Agent::~Agent() = default;

void Agent::observe(const Msg& x) { memory_.add(x); }

Value Agent::save_state() const { return Value(); }

void Agent::load_state(const Value&) {}

Value Agent::call(const std::string& method, const Value& args) {
  auto it = methods_.find(method);
  if (it == methods_.end()) {
    std::string known;
    for (const auto& [n, _] : methods_) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::unknown_method,
                "no method '" + method + "'; known methods: " + (known.empty() ? "(none)" : known), id(),
                class_name());
  }
  return it->second(args);
}

std::shared_ptr<ChatModel> Agent::model(const std::string& config_name) {
  if (init_.services == nullptr)
    throw Error(ErrorCode::config_error, "this agent is not hosted by a server; no models", id(),
                class_name());
  return init_.services->model(config_name, id());
}

std::shared_ptr<Tools> Agent::tools() {
  if (init_.services == nullptr)
    throw Error(ErrorCode::config_error, "this agent is not hosted by a server; no tools", id(),
                class_name());
  return init_.services->tools(id());
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

namespace agentd {

Msg AsyncAgent::reply(const Msg&) {
  throw Error(ErrorCode::internal,
              "AsyncAgent::reply was called; the host calls reply_async() of asynchronous agents", id(),
              class_name());
}

Task<void> AsyncAgent::observe_async(const Msg& x) {
  observe(x);
  co_return;
}

Task<Value> AsyncAgent::call_async(const std::string& method, const Value& args) {
  if (auto it = async_methods_.find(method); it != async_methods_.end()) co_return co_await it->second(args);
  auto sync_names = method_names();
  if (std::find(sync_names.begin(), sync_names.end(), method) != sync_names.end())
    co_return call(method, args);
  std::string known;
  for (const auto& n : async_method_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::unknown_method,
              "no method '" + method + "'; known methods: " + (known.empty() ? "(none)" : known), id(),
              class_name());
}

std::vector<std::string> AsyncAgent::async_method_names() const {
  std::vector<std::string> out = method_names();
  for (const auto& [n, _] : async_methods_) out.push_back(n);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void AsyncAgent::register_async_method(std::string name, AsyncMethod fn) {
  async_methods_[std::move(name)] = std::move(fn);
}

}  // namespace agentd
