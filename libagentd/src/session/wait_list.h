// WaitList: the threads waiting for a change to one object that a mutex guards. It does what a
// std::condition_variable does, with one difference that matters on the client's hot path: a
// woken thread does not come back holding the mutex marked as contended. (glibc's condition
// variable re-locks the mutex that way after every wake-up, so the waiter's next unlock costs one
// more futex call: one per synchronous call, on the calling thread, before it sees its result.)
// Each thread waits on a semaphore of its own; a waker takes the list under the mutex and posts
// after unlocking.
#pragma once

#include "thread_semaphore.h"

#include <chrono>
#include <mutex>
#include <vector>

namespace agentd::detail {

class WaitList {
 public:
  WaitList() = default;
  WaitList(const WaitList&) = delete;
  WaitList& operator=(const WaitList&) = delete;

  // The mutex held through lock: waits until pred() holds (true) or timeout passes (false).
  template <typename Pred>
  bool wait_for(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout, Pred pred) {
    const auto deadline = deadline_after(timeout);
    while (!pred()) {
      if (!wait_once(lock, deadline)) return pred();
    }
    return true;
  }

  // The threads to wake: taken under the mutex, woken after unlocking it.
  class Wake {
   public:
    Wake() = default;
    Wake(Wake&&) = default;
    Wake& operator=(Wake&&) = default;
    ~Wake() { run(); }
    void run();

   private:
    friend class WaitList;
    std::vector<Semaphore*> sems_;
  };
  // The mutex held: everyone waiting now.
  [[nodiscard]] Wake take_locked() {
    Wake w;
    w.sems_.swap(waiting_);
    return w;
  }

 private:
  static std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout);
  // One wait: false when the deadline passed without a wake-up.
  bool wait_once(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline);

  std::vector<Semaphore*> waiting_;  // guarded by the caller's mutex
};

}  // namespace agentd::detail
