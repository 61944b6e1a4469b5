// WorkerPool: the threads agent code runs on. Thread-safe.
//
// Waking: a submit wakes at most one idle thread at a time, and a woken thread that sees more
// queued work wakes the next (so a burst of short tasks is drained by the threads already
// awake instead of costing a futex wake and a context switch per task). Idle threads wait each
// on a semaphore of its own, woken last-idle-first (the warmest cache); a woken thread does not
// wake holding a contended mutex (a condition variable's wait re-locks its mutex as contended,
// which costs every wake-up one more futex call when it unlocks).
// Growing: agents may block for seconds, so a monitor thread watches for starvation: when
// queued tasks made no progress for starved_after (kStarvedAfter unless the owner says) while no
// thread was idle, it adds threads for them, at most doubling the pool per check (up to
// max_threads). Extra threads leave after idle_timeout, down to min_threads.
#pragma once

#include "thread_semaphore.h"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace agentd::detail {

class WorkerPool {
 public:
  WorkerPool(std::size_t min_threads, std::size_t max_threads,
             std::chrono::milliseconds idle_timeout = std::chrono::seconds(30),
             std::chrono::microseconds starved_after = kStarvedAfter);
  ~WorkerPool();  // stop()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queued work that made no progress for this long, with no idle thread, grows the pool (the
  // default: a blocked call gets a thread within a millisecond).
  static constexpr std::chrono::microseconds kStarvedAfter{1000};

  // Runs task on a worker thread. Tasks must not throw (wrap user code yourself).
  // After stop() the task is dropped.
  void submit(std::function<void()> task);

  // Runs the queued tasks, then joins every thread. Idempotent. Not from a worker thread.
  void stop();

  std::size_t threads() const;
  std::size_t busy() const;
  std::size_t max_threads() const { return max_threads_; }

 private:
  // An idle thread's place to wait. Shared: a submitter posts to it after unlocking mu_.
  struct Idle {
    Semaphore ready;
    bool woken = false;  // guarded by mu_: taken off the idle stack by a submit
  };

  void spawn_locked();
  // Takes the last idle thread off the stack if none has a wake-up pending: the caller then
  // posts to its semaphore (after unlocking mu_, so the woken thread does not block on it).
  std::shared_ptr<Idle> wake_one_locked();
  // Stopping, or idle threads missed their wake-up: wakes every idle thread.
  void wake_all_idle_locked();
  void worker_main(std::size_t key);
  void monitor_main();
  void join_finished_locked(std::vector<std::thread>& out);

  const std::size_t min_threads_;
  const std::size_t max_threads_;
  const std::chrono::milliseconds idle_timeout_;
  const std::chrono::microseconds starved_after_;

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Idle>> idle_stack_;  // idle threads, the last to go idle last
  std::condition_variable monitor_cv_;             // the monitor waits here for work to watch
  std::deque<std::function<void()>> queue_;
  std::unordered_map<std::size_t, std::thread> threads_;
  std::vector<std::thread> finished_;  // threads that left on idle; joined later
  std::size_t next_key_ = 0;
  std::size_t idle_ = 0;
  std::size_t starting_ = 0;   // spawned threads that have not reached the queue yet
  bool wake_pending_ = false;  // a notified worker has not taken over yet
  bool monitor_watching_ = false;
  std::chrono::steady_clock::time_point last_progress_;  // when a task was last taken
  std::thread monitor_;
  bool stopping_ = false;
};

}  // namespace agentd::detail
