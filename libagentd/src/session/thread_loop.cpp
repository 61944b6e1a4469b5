#include "thread_loop.h"

#include <agentd/error.h>

#include <kj/common.h>

#include <atomic>
#include <thread>

namespace agentd::detail {

namespace {

// A wait of the owner thread: woken through a cross-thread fulfiller, so that a wake-up from
// another thread (another client's loop thread) ends the loop's wait as one from a callback on
// this thread does.
class LoopWait final : public WaitList::Driver::Wait {
 public:
  LoopWait() : paf_(kj::newPromiseAndCrossThreadFulfiller<void>()) {}
  void wake() override {
    paf_.fulfiller->fulfill();
    done_.store(true, std::memory_order_release);  // after the last use of this object
  }
  kj::Promise<void> take_promise() { return kj::mv(paf_.promise); }
  bool done() const { return done_.load(std::memory_order_acquire); }

 private:
  kj::PromiseCrossThreadFulfillerPair<void> paf_;
  std::atomic<bool> done_{false};
};

}  // namespace

std::shared_ptr<ThreadLoop> ThreadLoop::for_this_thread() {
  thread_local std::weak_ptr<ThreadLoop> mine;
  if (auto loop = mine.lock()) return loop;
  std::shared_ptr<ThreadLoop> loop;
  try {
    loop.reset(new ThreadLoop());
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::bad_request,
                std::string("ClientOptions::single_thread: this thread already runs an event loop of its "
                            "own (") +
                    e.getDescription().cStr() + "); make the client without single_thread");
  }
  mine = loop;
  return loop;
}

ThreadLoop::ThreadLoop() : io_(kj::setupAsyncIo()), owner_(std::this_thread::get_id()) {
  WaitList::thread_driver() = this;
}

ThreadLoop::~ThreadLoop() noexcept(false) {
  if (WaitList::thread_driver() == this) WaitList::thread_driver() = nullptr;
}

void ThreadLoop::kick() {
  if (!on_owner_thread() || running_) return;
  running_ = true;
  KJ_DEFER(running_ = false);
  io_.waitScope.poll();
}

std::unique_ptr<WaitList::Driver::Wait> ThreadLoop::start() { return std::make_unique<LoopWait>(); }

bool ThreadLoop::drive(Wait& w, std::chrono::steady_clock::time_point deadline) {
  if (running_)
    throw Error(ErrorCode::bad_request,
                "a wait inside a callback of a single-thread client (Placeholder::on_ready, "
                "on_chunk) would block its own connection: read results there only when they are "
                "ready, or wait outside the callback");
  auto& wait = static_cast<LoopWait&>(w);
  const auto now = std::chrono::steady_clock::now();
  const auto left = deadline > now ? std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now)
                                   : std::chrono::nanoseconds(0);
  running_ = true;
  KJ_DEFER(running_ = false);
  return wait.take_promise()
      .then([]() { return true; })
      .exclusiveJoin(
          io_.provider->getTimer().afterDelay(left.count() * kj::NANOSECONDS).then([]() { return false; }))
      .wait(io_.waitScope);
}

void ThreadLoop::settle(Wait& w) {
  auto& wait = static_cast<LoopWait&>(w);
  while (!wait.done()) std::this_thread::yield();
}

}  // namespace agentd::detail
