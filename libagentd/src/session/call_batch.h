// The batching of calls into Session.submit: the calls issued in one loop turn travel together
// in one message, cut at about kBatchBytes. Each call gets a ticket that its CallDone redeems
// later (call_done.h). Loop thread only.
#pragma once

#include <agentd/msg.h>
#include <agentd/value.h>

#include "agentd.capnp.h"
#include "result_slot.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace agentd::detail {

struct LoopState;

// A placeholder passed as input, as the loop thread needs it (no reference to its owner).
struct InputRef {
  std::string call_id;
  std::string origin;
  std::string server_id;
};

// Results up to this size come back with the call's CallDone; bigger ones only when get() asks.
constexpr std::uint64_t kInlineLimit = 64 * 1024;

// One call waiting for the next Session.submit. Built on any thread, then moved to the loop
// thread.
struct OutSpec {
  std::uint64_t ticket = 0;  // set by send_spec
  wire::CallKind kind = wire::CallKind::REPLY;
  std::string agent_id;
  std::string call_id;
  std::string method;
  std::string class_name;
  std::string name;
  std::optional<Value> args;
  std::optional<Msg> msg;
  std::optional<InputRef> ref;
  std::uint64_t inline_limit = 0;
  bool stream = false;           // reply / methodAsync: the reply's chunks come back (CallSink.chunks)
  std::uint64_t timeout_ms = 0;  // the call's deadline after the server queued it; 0: the server's
  std::string trace_id;          // the caller's trace (AgentRef::with_trace_id); empty: none
  // Set by send_spec: past it, a call refused as overloaded is not sent again.
  std::chrono::steady_clock::time_point deadline{};
};

// A spec of kind for agent_id; the caller fills in the rest.
inline OutSpec spec_for(wire::CallKind kind, const std::string& agent_id) {
  OutSpec spec;
  spec.kind = kind;
  spec.agent_id = agent_id;
  return spec;
}

// About how many bytes spec takes in a Session.submit.
std::size_t spec_size(const OutSpec& s);

// Loop thread: queues spec for the next submit, and ticket under a new ticket number until its
// CallDone arrives. The submit goes at the end of this loop turn, or at once when the batch is
// full; a call that would take the batch past loop.limits.batch_limit() starts the next one. A
// call bigger than loop.limits.max_message_bytes fails at once (too_large) and is not sent.
// A call the server refuses as overloaded is sent again, with the same ticket, after a backoff
// (loop.limits), until its deadline; then it fails with the server's error.
void send_spec(LoopState& loop, OutSpec spec, Ticket ticket);

// At most this many Session.submit messages (each of at most 4,096 calls and about the batch
// limit in bytes) are unanswered on one connection; later batches wait on the client, in order.
constexpr unsigned kMaxSubmitsInFlight = 4;

// A submit of one call of at most this size (spec_size), reported and not streamed, asks to be
// answered with the call's CallDone (Session.submit's answerLone) and does not count against
// kMaxSubmitsInFlight.
constexpr std::size_t kLoneCallBytes = 4096;

// Loop thread: sends the gathered calls as one Session.submit, or holds them (in order) while
// kMaxSubmitsInFlight submits are unanswered. A call too big for any message, or a submit that
// fails, fails its tickets.
void flush(LoopState& loop);

// Loop thread: runs fn once every call issued so far has been submitted (now, when none is
// held). Every other request goes through here, so nothing overtakes calls issued earlier.
void after_calls_sent(LoopState& loop, kj::Function<void()> fn);

// Loop thread: sends held batches, in order, while there is room on the connection, and runs
// the requests that waited for them (after a submit was answered, or a reconnect).
void send_held(LoopState& loop);

}  // namespace agentd::detail
