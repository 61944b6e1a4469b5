// What a call or a new agent changed, as the state store's changes (StateStore::Change).
// Private to the host's files. Every function runs on the thread running the agent's code (its
// worker, its constructor's worker, or the loop thread for an asynchronous agent), without the
// host lock: an agent runs one call at a time, and the slot's store bookkeeping (saved_clears,
// saved_memory, saved_state_hash) is touched only there.
#pragma once

#include "mailbox.h"
#include "state_store.h"

#include <string>

namespace agentd::detail {

// Into c, what the store lacks of the agent's own state: its save_state() when its bytes changed
// since the last save (save_state() is agent code: it may throw).
void record_own_state(AgentSlot& slot, const Agent& agent, StateStore::Change& c);
// Into c, the messages added to the agent's memory since the last save (all of them, replacing
// the stored ones, after a clear()).
void record_new_memory(AgentSlot& slot, const Memory& memory, StateStore::Change& c);
// The put_agent change of a new agent (its constructor's worker). save_state() may throw.
StateStore::Change initial_change(AgentSlot& slot, const Agent& agent);
// Fills call.change with what call changed (a barrier for reads) and its outcome; a
// save_state() that throws becomes the call's error (the store keeps the state it has).
void record_change(AgentSlot& slot, Call& call);
// A change made while its agent was deleted (its row is gone): only the call's result is kept.
void keep_result_only(StateStore::Change& change);
// A state store failure (not_applied) as the error of a call or creation on agent id.
Error store_error(const Error& failure, const std::string& id, const std::string& class_name);

}  // namespace agentd::detail
