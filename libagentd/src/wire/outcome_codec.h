// The wire form of a call's outcome (wire::Outcome: its message, its error, or "too large" when
// the message is over the caller's inline limit), about how many bytes it takes, and the errors
// a server answers for agents it does not have. The server writes (rpc/: Result.get, Agent.reply,
// AgentServer.fetch, Session's CallSink.done and read) and the client reads (session/, peers)
// through these. Private to libagentd; any thread.
#pragma once

#include <agentd/error.h>
#include <agentd/msg.h>

#include "agentd.capnp.h"
#include "outcome.h"

#include <cstdint>
#include <string>
#include <variant>

namespace agentd::detail {

// About how many bytes write_error(e) / write_outcome(o, ..., inline_limit) write.
std::size_t error_size(const Error& e);
std::size_t outcome_size(const Outcome& o, std::uint64_t inline_limit);
// The same for an outcome not (yet) made into one: a message (or else an error) with usage.
std::size_t outcome_size(const CallUsage& usage, const Msg* msg, const Error* error);

// inline_limit > 0: a bigger message is announced (tooLarge, with its size) instead of sent. The
// usage goes with it either way (nothing when it is all zeros).
void write_outcome(const Outcome& o, wire::Outcome::Builder out, std::uint64_t inline_limit = 0);
// The message or error of in, with its usage. An outcome announced as tooLarge has neither: the
// caller checks isTooLarge() first (reading one throws Error(internal)). Throws
// Error(bad_request) for a message that cannot be read (read_msg).
Outcome read_outcome(wire::Outcome::Reader in);
// The usage in (zeros when it has none: no model used, or a writer older than the field).
CallUsage read_usage(wire::Outcome::Reader in);
void write_usage(const CallUsage& u, wire::Outcome::Builder out);  // nothing when u is empty

// unknown_agent: "no agent '<id>' on this server", naming the agent.
Error unknown_agent_error(const std::string& id);

}  // namespace agentd::detail
