#include <agentd/error.h>

#include <array>
#include <utility>

namespace agentd {

namespace {

constexpr std::array<std::pair<ErrorCode, std::string_view>, 23> kNames{{
    {ErrorCode::internal, "internal"},
    {ErrorCode::unknown_agent, "unknown_agent"},
    {ErrorCode::unknown_class, "unknown_class"},
    {ErrorCode::bad_args, "bad_args"},
    {ErrorCode::agent_failed, "agent_failed"},
    {ErrorCode::expired, "expired"},
    {ErrorCode::duplicate_call_id, "duplicate_call_id"},
    {ErrorCode::unknown_method, "unknown_method"},
    {ErrorCode::disconnected, "disconnected"},
    {ErrorCode::timeout, "timeout"},
    {ErrorCode::overloaded, "overloaded"},
    {ErrorCode::bad_request, "bad_request"},
    {ErrorCode::model_error, "model_error"},
    {ErrorCode::unauthenticated, "unauthenticated"},
    {ErrorCode::duplicate_agent, "duplicate_agent"},
    {ErrorCode::stopping, "stopping"},
    {ErrorCode::unknown_call, "unknown_call"},
    {ErrorCode::config_error, "config_error"},
    {ErrorCode::plugin_error, "plugin_error"},
    {ErrorCode::too_large, "too_large"},
    {ErrorCode::not_applied, "not_applied"},
    {ErrorCode::interrupted, "interrupted"},
    {ErrorCode::tool_error, "tool_error"},
}};

std::string describe(ErrorCode code, const std::string& message, const std::string& agent_id,
                     const std::string& agent_class) {
  std::string out{to_string(code)};
  if (!agent_id.empty() || !agent_class.empty()) {
    out += ": agent ";
    out += agent_id.empty() ? "?" : agent_id;
    if (!agent_class.empty()) out += " (" + agent_class + ")";
  }
  out += ": ";
  out += message;
  return out;
}

}  // namespace

std::string_view to_string(ErrorCode code) {
  for (const auto& [c, n] : kNames)
    if (c == code) return n;
  return "internal";
}

ErrorCode error_code_from_string(std::string_view name) {
  for (const auto& [c, n] : kNames)
    if (n == name) return c;
  return ErrorCode::internal;
}

bool is_retryable(ErrorCode code) {
  switch (code) {
    case ErrorCode::disconnected:
    case ErrorCode::timeout:
    case ErrorCode::overloaded:
    case ErrorCode::stopping:
    case ErrorCode::not_applied:
      return true;
    default:
      return false;
  }
}

Error::Error(ErrorCode code, std::string message, std::string agent_id, std::string agent_class)
    : Error(code, std::move(message), std::move(agent_id), std::move(agent_class), is_retryable(code)) {}

Error::Error(ErrorCode code, std::string message, std::string agent_id, std::string agent_class,
             bool retryable)
    : std::runtime_error(describe(code, message, agent_id, agent_class)),
      code_(code),
      message_(std::move(message)),
      agent_id_(std::move(agent_id)),
      agent_class_(std::move(agent_class)),
      retryable_(retryable) {}

}  // namespace agentd
