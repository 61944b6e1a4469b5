#include "placeholder.h"

#include "call_done.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

namespace agentd {

namespace detail {

PlaceholderState::~PlaceholderState() { release(); }

void PlaceholderState::release() const {
  if (deferred && deferred->state.load() == DeferredReply::kHeld) core->lanes()->release(*deferred);
}

void PlaceholderState::fetch() {
  release();
  if (requested.exchange(true)) return;
  {
    // Already there (the common case): no need to involve the loop thread.
    std::lock_guard lock(slot->mu);
    if (slot->value || slot->error) return;
  }
  core->post([c = core.get(), id = call_id, slot = slot]() {
    slot->wanted = true;
    if (!slot->too_large || slot->full_requested) return;
    slot->full_requested = true;
    request_result(c->loop(), id, slot);
  });
}

std::shared_ptr<PlaceholderState> new_placeholder(const std::shared_ptr<ClientCore>& core,
                                                  const std::string& agent_id) {
  auto state = std::make_shared<PlaceholderState>();
  state->core = core;
  state->call_id = new_id();
  state->agent_id = agent_id;
  return state;
}

InputRef input_ref(const PlaceholderState& p) {
  p.release();  // its consumer looks it up by call id: it must be sent
  return InputRef{p.call_id, p.core->address(), p.core->server_id()};
}

void send_async(ClientCore& core, OutSpec spec, const PlaceholderState& state) {
  core.requests_.fetch_add(1, std::memory_order_relaxed);
  spec.call_id = state.call_id;
  spec.inline_limit = kInlineLimit;
  // Until it has finished, this thread's replies avoid its lane (they could overtake it).
  if (LaneSet* lanes = core.lanes()) lanes->note_rpc(state.slot);
  send_async_slot(core, std::move(spec), state.slot, state.agent_id);
}

void send_async_slot(ClientCore& core, OutSpec spec, std::shared_ptr<ResultSlot> slot,
                     const std::string& agent_id) {
  const bool posted = core.post([c = &core, spec = std::move(spec), slot]() mutable {
    Ticket t;
    t.slot = std::move(slot);
    t.call_id = spec.call_id;
    send_spec(c->loop(), std::move(spec), std::move(t));
  });
  // A call made after close() fails at once rather than waiting out the client's timeout.
  if (!posted) slot->fail(ClientCore::closed_error("call to agent '" + agent_id + "'"));
  core.kick();  // a single-thread client sends it now, not at its next wait
}

PlaceholderAwaiter::~PlaceholderAwaiter() {
  if (watch != 0) state->slot->unwatch(watch);
}

bool PlaceholderAwaiter::await_ready() {
  state->fetch();
  std::lock_guard lock(state->slot->mu);
  return state->slot->value || state->slot->error;
}

bool PlaceholderAwaiter::await_suspend(std::coroutine_handle<> h) {
  AsyncLoop& loop = require_async_loop("co_await on a placeholder");
  watch = state->slot->watch([&loop, h, alive = flag.alive]() { loop.resume(h, alive); });
  return watch != 0;  // 0: settled meanwhile, go on at once
}

Msg PlaceholderAwaiter::await_resume() {
  watch = 0;
  auto& slot = *state->slot;
  std::lock_guard lock(slot.mu);
  if (slot.error) throw *slot.error;
  return *slot.value;
}

}  // namespace detail

Msg Placeholder::get() const { return get(s_->core->options().timeout); }

Msg Placeholder::get(std::chrono::milliseconds timeout) const {
  if (!s_->requested.load()) {
    s_->core->requests_.fetch_add(1, std::memory_order_relaxed);
    s_->core->waits_.fetch_add(1, std::memory_order_relaxed);
  }
  {
    // A result that is there is returned on any thread, the loop's included (on_ready callbacks
    // read it there); only a wait must not happen on the loop thread.
    auto& slot = *s_->slot;
    std::lock_guard lock(slot.mu);
    if (slot.value || slot.error) {
      s_->requested.store(true);
      if (slot.error) throw *slot.error;
      return *slot.value;
    }
  }
  detail::ClientCore::check_not_on_loop("Placeholder::get()");
  s_->core->check_thread("Placeholder::get()");
  // Held back for a lane: runs on this thread's lane now when this thread made it. The wait
  // below has what is left of timeout (a lane whose answer did not come within it has handed
  // the call to the connection, and the wait then ends at once).
  auto left = timeout;
  if (s_->deferred) {
    const auto start = std::chrono::steady_clock::now();
    s_->core->lanes()->get(*s_->deferred, timeout);
    left -= std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    left = std::max(left, std::chrono::milliseconds(0));
  }
  s_->fetch();
  auto& slot = *s_->slot;
  std::unique_lock lock(slot.mu);
  if (!slot.waiters.wait_for(lock, left, [&slot] { return slot.value || slot.error; }))
    throw Error(ErrorCode::timeout,
                fmt::format("the result of call {} to agent {} was not ready within {} ms", s_->call_id,
                            s_->agent_id, timeout.count()),
                s_->agent_id, "", true);
  if (slot.error) throw *slot.error;
  return *slot.value;
}

void Placeholder::on_ready(std::function<void()> fn) const {
  if (!s_->requested.load()) s_->core->requests_.fetch_add(1, std::memory_order_relaxed);
  s_->fetch();
  // watch() keeps fn when the slot is not settled yet (it then runs on the settling thread);
  // settled already, it gives fn back by returning 0 and fn runs here.
  auto shared = std::make_shared<std::function<void()>>(std::move(fn));
  if (s_->slot->watch([shared] { (*shared)(); }) == 0) (*shared)();
}

std::optional<std::string> Placeholder::next_chunk() const { return next_chunk(s_->core->options().timeout); }

std::optional<std::string> Placeholder::next_chunk(std::chrono::milliseconds timeout) const {
  s_->release();
  auto& slot = *s_->slot;
  std::unique_lock lock(slot.mu);
  // A stream ends with its CallDone; a placeholder that is not streamed ends with its result.
  auto ready = [&slot] { return !slot.chunks.empty() || slot.stream_ended || slot.value || slot.error; };
  if (!ready()) {
    s_->core->check_thread("Placeholder::next_chunk()");
    s_->core->waits_.fetch_add(1, std::memory_order_relaxed);
    if (!slot.waiters.wait_for(lock, timeout, ready))
      throw Error(ErrorCode::timeout,
                  fmt::format("no chunk of call {} to agent {} within {} ms", s_->call_id, s_->agent_id,
                              timeout.count()),
                  s_->agent_id, "", true);
  }
  if (!slot.chunks.empty()) {
    std::string c = std::move(slot.chunks.front());
    slot.chunks.pop_front();
    return c;
  }
  // Every chunk was read: the end of the stream, or the failure that ended it.
  if (slot.error) throw *slot.error;
  return std::nullopt;
}

void Placeholder::on_chunk(std::function<void(std::string_view)> fn) const {
  s_->core->check_open("Placeholder::on_chunk");
  s_->release();
  s_->core->post([slot = s_->slot, fn = std::move(fn)]() mutable { slot->set_on_chunk(std::move(fn)); });
}

CallUsage Placeholder::usage() const {
  auto& slot = *s_->slot;
  std::lock_guard lock(slot.mu);
  return slot.value || slot.error ? slot.usage : CallUsage{};
}

const std::string& Placeholder::call_id() const { return s_->call_id; }
const std::string& Placeholder::origin() const { return s_->core->address(); }

}  // namespace agentd
