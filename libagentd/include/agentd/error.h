// agentd::Error: the one error type a client sees, whether the cause was local or remote.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace agentd {

enum class ErrorCode {
  internal,           // a bug or an unexpected fault
  unknown_agent,      // no agent with that id on that server
  unknown_class,      // no plugin on the server registers that class
  bad_args,           // arguments rejected (by agentd or by the agent's constructor)
  agent_failed,       // the agent's code threw
  expired,            // the result was evicted from the result pool
  duplicate_call_id,  // a call id was used twice on one server
  unknown_method,     // the agent has no such named method
  disconnected,       // the connection to the server was lost or refused
  timeout,            // a deadline passed before the answer came
  overloaded,         // the server refused work it cannot take now
  bad_request,        // a malformed request
  model_error,        // a model API call failed
  unauthenticated,    // missing or wrong credentials
  duplicate_agent,    // an agent with that id already exists
  stopping,           // the server is shutting down
  unknown_call,       // no call with that id is known to the server
  config_error,       // a configuration file or option is invalid
  plugin_error,       // a plugin could not be loaded
  too_large,          // a message is bigger than one wire message can carry
  not_applied,        // the call had no effect (lost in a server restart, or its state could
                      // not be saved): retrying it is safe
  interrupted,        // the call may have run, in whole or in part (it was running when its
                      // server died, or the server can no longer tell): not safe to retry blindly
  tool_error,         // an MCP tool server failed (agentd/tool.h): it could not start, died,
                      // answered garbage or too much, or refused the request
};

// The stable lowercase name of a code ("unknown_agent", ...), and back (internal if unknown).
std::string_view to_string(ErrorCode code);
ErrorCode error_code_from_string(std::string_view name);

// Retrying the same request later may succeed for these codes.
bool is_retryable(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message, std::string agent_id = {}, std::string agent_class = {});
  Error(ErrorCode code, std::string message, std::string agent_id, std::string agent_class, bool retryable);

  // An error that a retry of the same request may get past, whatever is_retryable(code) says
  // (e.g. unknown_call for a result whose producer may still arrive).
  static Error retryable(ErrorCode code, std::string message, std::string agent_id = {},
                         std::string agent_class = {}) {
    return Error(code, std::move(message), std::move(agent_id), std::move(agent_class), true);
  }

  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& agent_id() const noexcept { return agent_id_; }
  const std::string& agent_class() const noexcept { return agent_class_; }
  bool retryable() const noexcept { return retryable_; }

 private:
  ErrorCode code_;
  std::string message_;
  std::string agent_id_;
  std::string agent_class_;
  bool retryable_;
};

}  // namespace agentd
