// Running agent code (constructors, calls, save_state, load_state): what it throws becomes an
// Error naming the agent. Private to the host's files.
#pragma once

#include <agentd/error.h>

#include <optional>
#include <string>

namespace agentd::detail {

struct AgentSlot;

// What agent code threw (the exception being handled: call inside a catch), as an Error naming
// the agent: an Error keeps its code, anything else is agent_failed. what names the code
// ("reply", "method 'm'", "constructor").
Error describe_exception(const AgentSlot& s, const std::string& what);

// Runs agent code f; whatever it throws, as an Error naming the agent.
template <typename F>
std::optional<Error> guarded(const AgentSlot& s, const std::string& what, F&& f) {
  try {
    f();
    return std::nullopt;
  } catch (...) {
    return describe_exception(s, what);
  }
}

}  // namespace agentd::detail
