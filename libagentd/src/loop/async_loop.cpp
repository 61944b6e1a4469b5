#include "async_loop.h"

#include <agentd/error.h>

#include "bridge.h"
#include "worker_pool.h"

#include <fmt/format.h>

namespace agentd::detail {

namespace {
thread_local AsyncLoop* t_current = nullptr;
}  // namespace

AsyncLoop* current_async_loop() { return t_current; }

kj::Promise<void> steady_deadline(kj::Timer& timer, std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return kj::READY_NOW;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count() + 1;
  return timer.afterDelay(ns * kj::NANOSECONDS).then([&timer, deadline]() {
    return steady_deadline(timer, deadline);
  });
}

AsyncLoop& require_async_loop(const char* what) {
  if (t_current == nullptr || !t_current->on_loop_thread())
    throw Error(ErrorCode::bad_request,
                fmt::format("{} needs a server's event loop: co_await it inside an "
                            "AsyncAgent's call, which the server runs on its loop thread",
                            what));
  return *t_current;
}

LoopScheduler::LoopScheduler(kj::Timer& timer, Bridge& bridge, WorkerPool& workers)
    : timer_(timer),
      bridge_(bridge),
      workers_(workers),
      thread_(std::this_thread::get_id()),
      previous_(t_current),
      tasks_(std::make_unique<kj::TaskSet>(errors_)) {
  t_current = this;
}

LoopScheduler::~LoopScheduler() {
  if (t_current == this) t_current = previous_;
  ready_.clear();
  tasks_.reset();
}

void LoopScheduler::defer(kj::Function<void()> fn) {
  ready_.push_back(kj::mv(fn));
  if (drain_scheduled_) return;
  drain_scheduled_ = true;
  tasks_->add(kj::evalLater([this]() { drain(); }));
}

void LoopScheduler::drain() {
  // What the functions defer meanwhile runs in this same drain: one turn, no recursion.
  while (!ready_.empty()) {
    auto fn = kj::mv(ready_.front());
    ready_.pop_front();
    fn();
  }
  drain_scheduled_ = false;
}

void LoopScheduler::resume(std::coroutine_handle<> h, std::shared_ptr<bool> alive) {
  if (on_loop_thread()) {
    defer([h, alive = kj::mv(alive)]() {
      if (*alive) h.resume();
    });
  } else {
    bridge_.post([h, alive = kj::mv(alive)]() {
      if (*alive) h.resume();
    });
  }
}

void LoopScheduler::post(std::function<void()> fn) {
  if (on_loop_thread())
    defer([fn = std::move(fn)]() { fn(); });
  else
    bridge_.post([fn = std::move(fn)]() { fn(); });
}

void LoopScheduler::resume_after(std::chrono::nanoseconds delay, std::coroutine_handle<> h,
                                 std::shared_ptr<bool> alive) {
  const auto deadline = std::chrono::steady_clock::now() + delay;
  tasks_->add(steady_deadline(timer_, deadline).then([h, alive = kj::mv(alive)]() {
    if (*alive) h.resume();
  }));
}

void LoopScheduler::run_blocking(std::function<void()> fn, std::coroutine_handle<> h,
                                 std::shared_ptr<bool> alive) {
  workers_.submit([this, fn = std::move(fn), h, alive = std::move(alive)]() mutable {
    fn();
    bridge_.post([h, alive = kj::mv(alive)]() {
      if (*alive) h.resume();
    });
  });
}

}  // namespace agentd::detail
