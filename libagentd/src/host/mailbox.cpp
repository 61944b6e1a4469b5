#include "mailbox.h"

namespace agentd::detail {

const char* kind_name(Call::Kind k) {
  switch (k) {
    case Call::Kind::reply:
      return "reply";
    case Call::Kind::observe:
      return "observe";
    case Call::Kind::method:
      return "method";
    case Call::Kind::method_async:
      return "method_async";
    case Call::Kind::memory:
      return "memory";
    case Call::Kind::snapshot:
      return "snapshot";
  }
  return "?";
}

void Mailboxes::push(AgentSlot& slot, const std::shared_ptr<Call>& call) {
  call->enqueued = std::chrono::steady_clock::now();
  call->enqueued_wall = std::chrono::system_clock::now();
  slot.mailbox.push_back(call);
  ++queued_;
}

void Mailboxes::pump(const std::shared_ptr<AgentSlot>& slot) {
  while (!slot->busy && !slot->mailbox.empty()) {
    auto call = slot->mailbox.front();
    if (!call->input_ready) return;  // its waiter pumps again
    if (call->input) {
      if (const Error* upstream = std::get_if<Error>(call->input.get())) {
        // The input's producer failed: this call fails with that cause, without running.
        slot->mailbox.pop_front();
        --queued_;
        ++slot->failed;
        hooks_.fail(std::move(call), *upstream);
        continue;
      }
    }
    slot->busy = true;
    ++running_;
    hooks_.dispatch(slot, std::move(call));
  }
}

std::shared_ptr<Call> Mailboxes::finish_head(AgentSlot& slot) {
  --running_;
  auto call = std::move(slot.mailbox.front());
  slot.mailbox.pop_front();
  --queued_;
  slot.busy = false;
  return call;
}

std::list<std::shared_ptr<Call>> Mailboxes::take_waiting(AgentSlot& slot) {
  std::list<std::shared_ptr<Call>> waiting;
  auto from = slot.mailbox.begin();
  if (slot.busy && !slot.constructing && from != slot.mailbox.end()) ++from;
  waiting.splice(waiting.end(), slot.mailbox, from, slot.mailbox.end());
  queued_ -= waiting.size();
  return waiting;
}

void Mailboxes::drop(AgentSlot& slot, std::list<std::shared_ptr<Call>>::iterator call) {
  slot.mailbox.erase(call);
  --queued_;
}

namespace {

thread_local Continuation* t_continuation = nullptr;

}  // namespace

Continuation::Continuation() : outer_(t_continuation) { t_continuation = this; }

Continuation::~Continuation() { t_continuation = outer_; }

Continuation::Window::Window() : opened_(t_continuation) {
  if (opened_ != nullptr && !opened_->open_)
    opened_->open_ = true;
  else
    opened_ = nullptr;  // none, or already open (an outer window closes it)
}

Continuation::Window::~Window() {
  if (opened_ != nullptr) opened_->open_ = false;
}

bool Continuation::active() { return t_continuation != nullptr; }

bool Continuation::kept() { return t_continuation != nullptr && t_continuation->slot != nullptr; }

bool Continuation::take(std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call>& call) {
  Continuation* c = t_continuation;
  if (c == nullptr || !c->open_ || c->slot) return false;
  c->slot = std::move(slot);
  c->call = std::move(call);
  return true;
}

}  // namespace agentd::detail
