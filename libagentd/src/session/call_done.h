// The answers to calls sent on the session: the CallSink the server reports finished calls to,
// and what becomes of each CallDone (its ResultSlot filled, or its ticket's on_done run).
// Loop thread only.
#pragma once

#include "agentd.capnp.h"
#include "result_slot.h"

#include <memory>
#include <string>

namespace agentd::detail {

struct LoopState;

// The client end of a session on loop: its done() dispatches each CallDone. loop is borrowed
// and outlives the RPC system that calls the sink.
wire::CallSink::Client new_call_sink(LoopState& loop);

// Loop thread: redeems done's ticket (unknown tickets, failed already, are ignored).
void dispatch_done(LoopState& loop, wire::CallDone::Reader done);

// Loop thread: reads the whole result of call id into slot (after a "too large" answer, once
// get() wants it). A result the server evicted meanwhile fails slot with Error(expired).
void request_result(LoopState& loop, const std::string& id, const std::shared_ptr<ResultSlot>& slot);

// Loop thread: after a reconnect, asks the server for the result of a call sent before the
// connection went (ticket has a slot and call id): its outcome fills the slot (waiting while it
// is pending), or, when the server does not know the call id, Error(not_applied). Without a
// connection (lost again), waits in loop.lost_calls for the next one.
void look_up_lost(LoopState& loop, Ticket ticket);

// What a call lost in a reconnect becomes when the server answers that it does not know the call
// id: not_applied (safe to retry) only when the call never started there; interrupted when the
// server is another one now (restarted without its state); expired when it may have finished
// and been forgotten (sent before the server's forgotten horizon, forgotten_age_ms ago; -1: it
// never forgot one).
Error unknown_lost_call(const LoopState& loop, const Ticket& t, std::int64_t forgotten_age_ms);

// Any thread: throws the error a CallDone carries (of an observe / create / memory / method).
void throw_if_error(wire::CallDone::Reader d);

}  // namespace agentd::detail
