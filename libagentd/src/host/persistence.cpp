#include "persistence.h"

#include "agent_access.h"
#include "agent_code.h"

#include <functional>

namespace agentd::detail {

void record_own_state(AgentSlot& slot, const Agent& agent, StateStore::Change& c) {
  std::string state = encode_value(agent.save_state());
  const std::size_t hash = std::hash<std::string>()(state);
  if (hash == slot.saved_state_hash) return;  // unchanged: nothing to write
  c.has_state = true;
  c.state = std::move(state);
  slot.saved_state_hash = hash;
}

void record_new_memory(AgentSlot& slot, const Memory& memory, StateStore::Change& c) {
  const auto& msgs = memory.get();
  const std::uint64_t clears = AgentAccess::memory_clears(memory);
  std::size_t from = slot.saved_memory;
  if (clears != slot.saved_clears || msgs.size() < from) {
    c.memory_reset = true;
    from = 0;
    slot.saved_clears = clears;
  }
  c.memory_from = static_cast<std::int64_t>(from);
  for (std::size_t i = from; i < msgs.size(); ++i) append_framed(c.memory, encode_msg(msgs[i]));
  slot.saved_memory = msgs.size();
}

StateStore::Change initial_change(AgentSlot& slot, const Agent& agent) {
  StateStore::Change c;
  c.kind = StateStore::Change::Kind::put_agent;  // replaces any memory rows: all of it is new
  c.agent_id = slot.id;
  c.name = slot.name;
  c.class_name = slot.class_name;
  c.args = encode_value(agent.args());
  record_own_state(slot, agent, c);
  record_new_memory(slot, agent.memory(), c);
  return c;
}

void record_change(AgentSlot& s, Call& c) {
  StateStore::Change ch;
  ch.agent_id = s.id;
  if (reads_only(c)) {
    ch.kind = StateStore::Change::Kind::barrier;  // reads only; published in commit order
  } else {
    ch.kind = StateStore::Change::Kind::call;
    Agent& agent = *s.agent;
    if (auto err = guarded(s, "save_state", [&] { record_own_state(s, agent, ch); })) {
      // The state the store has stays; the call reports the failure.
      c.out_msg.reset();
      c.out_error = std::move(err);
    }
    record_new_memory(s, agent.memory(), ch);
  }
  if (c.kind == Call::Kind::reply || c.kind == Call::Kind::method_async) {
    ch.call_id = c.call_id;
    Outcome o = c.out_error ? Outcome(*c.out_error) : Outcome(*c.out_msg);
    o.usage = call_usage(c);
    ch.outcome = encode_outcome(o);
  }
  c.change = std::make_unique<StateStore::Change>(std::move(ch));
}

void keep_result_only(StateStore::Change& change) {
  change.has_state = false;
  change.memory_reset = false;
  change.memory.clear();
}

Error store_error(const Error& failure, const std::string& id, const std::string& class_name) {
  return Error(failure.code(), failure.message(), id, class_name, /*retryable=*/true);
}

}  // namespace agentd::detail
