// LoopScheduler: the AsyncLoop (agentd/task.h) of one KJ event-loop thread — where asynchronous
// agent code runs and resumes. It owns nothing of the agents: it only schedules.
//
// Resumes and deferred functions run at the top of a loop turn (from a kj::evalLater drain, a
// timer or the bridge), never inside the function that asked for them, so agent code never runs
// under a caller's lock and chains of immediately-ready calls do not grow the stack.
// Cross-thread resumes go through the loop's one Bridge.
#pragma once

#include <agentd/task.h>

#include "task_errors.h"

#include <kj/async.h>
#include <kj/function.h>
#include <kj/timer.h>

#include <chrono>
#include <coroutine>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

namespace agentd::detail {

class Bridge;
class WorkerPool;

// Resolves once std::chrono::steady_clock reaches deadline. (A kj::Timer measures from the time
// its loop last read the clock, which may be a little behind: this waits again if it woke early,
// so a delay is never cut short.)
kj::Promise<void> steady_deadline(kj::Timer& timer, std::chrono::steady_clock::time_point deadline);

class LoopScheduler final : public AsyncLoop {
 public:
  // Construct on the loop thread; timer, bridge and workers are that loop's and outlive this.
  // While it exists it is the thread's current_async_loop().
  LoopScheduler(kj::Timer& timer, Bridge& bridge, WorkerPool& workers);
  ~LoopScheduler() override;
  LoopScheduler(const LoopScheduler&) = delete;
  LoopScheduler& operator=(const LoopScheduler&) = delete;

  // Loop thread: runs fn at the top of a coming loop turn, after the functions deferred before.
  void defer(kj::Function<void()> fn);

  void resume(std::coroutine_handle<> h, std::shared_ptr<bool> alive) override;
  void resume_after(std::chrono::nanoseconds delay, std::coroutine_handle<> h,
                    std::shared_ptr<bool> alive) override;
  void run_blocking(std::function<void()> fn, std::coroutine_handle<> h,
                    std::shared_ptr<bool> alive) override;
  void post(std::function<void()> fn) override;
  bool on_loop_thread() const override { return std::this_thread::get_id() == thread_; }

  kj::Timer& timer() { return timer_; }
  // Loop thread: keeps promise running until it settles or this scheduler goes.
  void add_task(kj::Promise<void> promise) { tasks_->add(kj::mv(promise)); }

 private:
  void drain();

  kj::Timer& timer_;
  Bridge& bridge_;
  WorkerPool& workers_;
  const std::thread::id thread_;
  AsyncLoop* previous_;  // the thread's current loop before this one
  std::deque<kj::Function<void()>> ready_;
  bool drain_scheduled_ = false;
  TaskErrors errors_{"asynchronous agent task"};
  // Timers, the drain, promises awaited by coroutines. (A unique_ptr: kj::TaskSet's destructor
  // may throw, which an AsyncLoop's may not.)
  std::unique_ptr<kj::TaskSet> tasks_;
};

}  // namespace agentd::detail
