// What agentd::AgentRef shares with the rest of the client layer: reading the Value an
// AgentRef::to_value() made, and looking an agent's info up.
#pragma once

#include <agentd/client.h>

#include "agentd.capnp.h"
#include "loop_state.h"
#include "sync.h"

#include <kj/async.h>

#include <cstdint>
#include <string>

namespace agentd::detail {

// Where the agent an agent reference names lives.
struct AgentAddress {
  std::string host;
  std::uint16_t port = 0;
  std::string id;
  std::string server_id;  // empty in references that do not say
};

// Any thread. Throws Error(bad_args) for a Value that is not an agent reference or names no
// reachable server (local mode).
AgentAddress parse_agent_ref(const Value& ref);

// Loop thread: sets st to the info of agent id (two pipelined requests: the agent, then its
// info), or fails it with the server's error. st outlives the promise.
kj::Promise<void> agent_info(LoopState& loop, const std::string& id, Sync<AgentInfo>& st);

}  // namespace agentd::detail
