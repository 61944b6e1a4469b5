// Where the answer to a call sent on the session lands: a ResultSlot (the result of a reply or
// methodAsync, waited for by the user threads holding its placeholder), or a Ticket's callbacks
// (calls a user thread waits for synchronously, or whose answers drive more loop-thread work).
#pragma once

#include <agentd/error.h>
#include <agentd/model.h>
#include <agentd/msg.h>

#include "agentd.capnp.h"
#include "sync.h"

#include <list>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace agentd::detail {

// A placeholder's result. User threads wait on the Sync (any thread may read it under mu); the
// other fields belong to the loop thread and track the eager answer and whether the whole
// message must still be asked for (call_done.h).
//
// A streamed reply's chunks land here too: queued under mu for next_chunk() until the CallDone
// ends the stream, or handed to the reader's callback on the loop thread once it has one.
struct ResultSlot : Sync<Msg> {
  // The call's model use: written by the loop thread before the outcome settles the slot (under
  // mu), read by any thread under mu once it is settled.
  CallUsage usage;
  bool wanted = false;          // loop thread: get() was called
  bool too_large = false;       // loop thread: the eager answer said "too large to inline"
  bool full_requested = false;  // loop thread

  // A list, not a deque: an empty std::deque allocates ~600 bytes, and most replies are not
  // streamed (a million placeholders in flight would carry 600 MB of empty deques).
  std::list<std::string> chunks;  // guarded by mu: arrived, not yet read
  bool stream_ended = false;      // guarded by mu: the call's CallDone came (or it failed)
  // Loop thread: Placeholder::on_chunk's callback; once set, chunks go to it.
  std::function<void(std::string_view)> on_chunk;

  // Loop thread: the next chunk of the stream.
  void push_chunk(std::string text);
  // Loop thread: sets the reader's callback and hands it the chunks queued so far (then
  // releases it at once when the stream has ended).
  void set_on_chunk(std::function<void(std::string_view)> fn);
  // Loop thread, after the outcome was delivered (or the call failed): no more chunks; the
  // reader's callback is released here.
  void end_stream() {
    WaitList::Wake wake;
    {
      std::lock_guard lock(mu);
      stream_ended = true;
      wake = waiters.take_locked();
    }
    wake.run();
    on_chunk = nullptr;
  }
};

// A call sent on the session whose CallDone has not arrived: slot for reply / methodAsync,
// otherwise on_done / on_fail. Loop thread only; the callbacks run there.
struct Ticket {
  std::shared_ptr<ResultSlot> slot;  // reply / methodAsync: where the result lands
  std::string call_id;
  std::function<void(wire::CallDone::Reader)> on_done;  // other kinds
  std::function<void(const Error&)> on_fail;
  // When the call was handed to the connection, and to which server (LoopState::server_epoch):
  // what a lookup after a reconnect needs to tell "never ran" from "cannot tell".
  std::chrono::steady_clock::time_point sent{};
  std::uint64_t server_epoch = 0;

  // The call will never be answered (its connection or submit failed).
  void fail(const Error& e) {
    if (slot) {
      slot->fail(e);
      slot->end_stream();
    } else if (on_fail) {
      on_fail(e);
    }
  }
};

}  // namespace agentd::detail
