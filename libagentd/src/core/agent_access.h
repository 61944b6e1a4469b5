// AgentAccess: what the host may do to an Agent that its subclasses may not (a friend of Agent).
#pragma once

#include <agentd/agent.h>

#include <functional>
#include <string_view>
#include <utility>

namespace agentd::detail {

struct AgentAccess {
  // The sink Agent::emit_chunk() feeds for the call about to run (empty: chunks are dropped).
  // The thread that runs the agent's calls sets it before a call and clears it after (an agent
  // runs one call at a time). sink must be callable from any thread the call runs on.
  static void set_chunk_sink(Agent& agent, std::function<void(std::string_view)> sink) {
    agent.chunk_sink_ = std::move(sink);
  }
};

}  // namespace agentd::detail
