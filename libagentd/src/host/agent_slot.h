// AgentSlot: one agent of an AgentHost with its mailbox (private to the host's files:
// agent_host.cpp and call_watch.cpp). Every field is guarded by the host lock unless it says
// otherwise.
#pragma once

#include "agent_host.h"
#include "agent_services.h"

#include <cstdint>
#include <list>
#include <memory>
#include <string>

namespace agentd::detail {

struct AgentSlot {
  std::string id;
  std::string name;
  std::string class_name;
  std::unique_ptr<Agent> agent;  // touched by the worker running the head call, else loop thread
  AsyncAgent* async = nullptr;   // agent, when it is an AsyncAgent (its calls run on the loop)
  // A list, not a deque: an empty std::deque allocates ~600 bytes, and most agents sit idle.
  std::list<std::shared_ptr<Call>> mailbox;
  bool busy = true;          // a call (or the constructor) is on a worker
  bool constructing = true;  // the constructor is (busy, with no call at the head)
  std::shared_ptr<UsageCounter> usage;  // this agent's model use (AgentServices::usage_counter)
  bool removed = false;
  std::uint64_t completed = 0;
  std::uint64_t failed = 0;
  // What the state store holds of this agent (touched only by the thread running its call):
  // the memory's clear count and length at the last save, and a hash of its saved state.
  std::uint64_t saved_clears = 0;
  std::size_t saved_memory = 0;
  std::size_t saved_state_hash = 0;
};

// Takes the calls that have not started; a running call stays at the head until it reports.
inline std::list<std::shared_ptr<Call>> take_waiting(AgentSlot& slot) {
  std::list<std::shared_ptr<Call>> waiting;
  auto from = slot.mailbox.begin();
  if (slot.busy && !slot.constructing && from != slot.mailbox.end()) ++from;
  waiting.splice(waiting.end(), slot.mailbox, from, slot.mailbox.end());
  return waiting;
}

inline const char* kind_name(Call::Kind k) {
  switch (k) {
    case Call::Kind::reply: return "reply";
    case Call::Kind::observe: return "observe";
    case Call::Kind::method: return "method";
    case Call::Kind::method_async: return "method_async";
    case Call::Kind::memory: return "memory";
    case Call::Kind::snapshot: return "snapshot";
  }
  return "?";
}

}  // namespace agentd::detail
