// Where the answer to a call sent on the session lands: a ResultSlot (the result of a reply or
// methodAsync, waited for by the user threads holding its placeholder), or a Ticket's callbacks
// (calls a user thread waits for synchronously, or whose answers drive more loop-thread work).
#pragma once

#include <agentd/error.h>
#include <agentd/msg.h>

#include "agentd.capnp.h"
#include "sync.h"

#include <functional>
#include <memory>
#include <string>

namespace agentd::detail {

// A placeholder's result. User threads wait on the Sync (any thread may read it under mu); the
// other fields belong to the loop thread and track the eager answer and whether the whole
// message must still be asked for (call_done.h).
struct ResultSlot : Sync<Msg> {
  bool wanted = false;          // loop thread: get() was called
  bool too_large = false;       // loop thread: the eager answer said "too large to inline"
  bool full_requested = false;  // loop thread
};

// A call sent on the session whose CallDone has not arrived: slot for reply / methodAsync,
// otherwise on_done / on_fail. Loop thread only; the callbacks run there.
struct Ticket {
  std::shared_ptr<ResultSlot> slot;  // reply / methodAsync: where the result lands
  std::string call_id;
  std::function<void(wire::CallDone::Reader)> on_done;  // other kinds
  std::function<void(const Error&)> on_fail;

  // The call will never be answered (its connection or submit failed).
  void fail(const Error& e) {
    if (slot)
      slot->fail(e);
    else if (on_fail)
      on_fail(e);
  }
};

}  // namespace agentd::detail
