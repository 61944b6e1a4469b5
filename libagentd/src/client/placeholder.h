// PlaceholderState: the user side of an agentd::Placeholder (the future result of a reply or
// call_async), and how a call is sent so that its result lands in one.
#pragma once

#include <agentd/client.h>

#include "call_batch.h"
#include "client_core.h"
#include "lanes.h"
#include "result_slot.h"

#include <atomic>
#include <memory>
#include <string>

namespace agentd::detail {

// Held by the Placeholder copies only, on user threads. Loop-thread code never holds one (nor
// the core): it holds only the ResultSlot, so the last reference to a ClientCore is always
// dropped on a user thread.
struct PlaceholderState {
  std::shared_ptr<ClientCore> core;
  std::string call_id;
  std::string agent_id;
  std::shared_ptr<ResultSlot> slot = std::make_shared<ResultSlot>();
  std::atomic<bool> requested{false};
  // A reply held back for a lane (lanes.h); null: sent when it was made.
  std::shared_ptr<DeferredReply> deferred;

  PlaceholderState() = default;
  PlaceholderState(const PlaceholderState&) = delete;
  PlaceholderState& operator=(const PlaceholderState&) = delete;
  // A reply still held back goes on the RPC connection: it runs whether or not anyone reads it.
  ~PlaceholderState();

  // Any user thread: a reply still held back goes on the RPC connection now (the placeholder is
  // used otherwise than by get() on the thread that made it).
  void release() const;

  // Any user thread: get() wants the result; if the eager answer said it is too large, ask for
  // all of it. Only the first call does anything.
  void fetch();
};

// A placeholder for a new call (a fresh call id) to agent_id over core.
std::shared_ptr<PlaceholderState> new_placeholder(const std::shared_ptr<ClientCore>& core,
                                                  const std::string& agent_id);

// p as the input of another call.
InputRef input_ref(const PlaceholderState& p);

// Any user thread: queues an asynchronous call (reply / methodAsync) whose result lands in
// state's slot, eagerly when it is at most kInlineLimit bytes (and its chunks too, when
// spec.stream is set).
void send_async(ClientCore& core, OutSpec spec, const PlaceholderState& state);
// The same for a result that lands in slot (a reply held back, released: lanes.h).
void send_async_slot(ClientCore& core, OutSpec spec, std::shared_ptr<ResultSlot> slot,
                     const std::string& agent_id);

}  // namespace agentd::detail
