#include "pre_login.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

PreLoginSlot::PreLoginSlot(PreLoginQueue& queue, std::string peer)
    : queue_(queue), peer_(std::move(peer)), admitted_(queue.timer_.now()) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  evict_ = kj::mv(paf.fulfiller);
  evicted_ = kj::mv(paf.promise);
}

PreLoginSlot::~PreLoginSlot() { leave(); }

void PreLoginSlot::leave() {
  if (!queued_) return;
  queue_.waiting_.erase(at_);
  queued_ = false;
}

void PreLoginSlot::logged_in() {
  logged_in_ = true;
  leave();
}

kj::Promise<void> PreLoginSlot::closing() {
  auto deadline = queue_.timer_.atTime(admitted_ + queue_.deadline_).then([this]() -> kj::Promise<void> {
    if (logged_in_) return kj::NEVER_DONE;
    leave();
    ++queue_.closed_;
    queue_.note(
        fmt::format("closing connection from {}: it did not log in within {} s of "
                    "connecting (--login-timeout)",
                    peer_, queue_.deadline_ / kj::MILLISECONDS / 1000.0));
    return kj::READY_NOW;
  });
  return kj::mv(evicted_).exclusiveJoin(kj::mv(deadline));
}

PreLoginQueue::PreLoginQueue(kj::Timer& timer, std::size_t max_connections, kj::Duration deadline)
    : timer_(timer), max_(max_connections < 1 ? 1 : max_connections), deadline_(deadline) {}

kj::Own<PreLoginSlot> PreLoginQueue::admit(std::string peer) {
  while (waiting_.size() >= max_) {
    PreLoginSlot* oldest = waiting_.front();
    oldest->leave();
    ++closed_;
    note(
        fmt::format("closing connection from {} before it logged in: {} connections are waiting "
                    "to log in (--max-unauthenticated-connections) and it waited longest ({} ms)",
                    oldest->peer_, max_, (timer_.now() - oldest->admitted_) / kj::MILLISECONDS));
    oldest->evict_->fulfill();
  }
  auto slot = kj::heap<PreLoginSlot>(*this, std::move(peer));
  slot->at_ = waiting_.insert(waiting_.end(), slot.get());
  slot->queued_ = true;
  return slot;
}

void PreLoginQueue::note(const std::string& line) {
  const auto now = timer_.now();
  if (logged_any_ && now - last_log_ < 1 * kj::SECONDS) {
    ++unlogged_;
    return;
  }
  spdlog::warn("{}{}", line,
               unlogged_ > 0 ? fmt::format(" ({} more closed before logging in since the last "
                                           "such line)",
                                           unlogged_)
                             : "");
  unlogged_ = 0;
  last_log_ = now;
  logged_any_ = true;
}

}  // namespace agentd::detail
