// AgentAccess: what the host may do to an Agent that its subclasses may not (a friend of Agent).
#pragma once

#include <agentd/agent.h>

#include <cstdint>
#include <functional>
#include <vector>
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
  // How many times the memory was cleared: the state store appends to its copy while this stays
  // the same, and rewrites it when it changes.
  static std::uint64_t memory_clears(const Memory& m) { return m.clears_; }
  // Restores a saved memory (before load_state(), after the constructor).
  static void set_memory(Memory& m, std::vector<Msg> msgs) { m.msgs_ = std::move(msgs); }
};

}  // namespace agentd::detail
