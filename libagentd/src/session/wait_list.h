// WaitList: the threads waiting for a change to one object that a mutex guards. It does what a
// std::condition_variable does, with one difference that matters on the client's hot path: a
// woken thread does not come back holding the mutex marked as contended. (glibc's condition
// variable re-locks the mutex that way after every wake-up, so the waiter's next unlock costs one
// more futex call: one per synchronous call, on the calling thread, before it sees its result.)
// Each thread waits on a semaphore of its own; a waker takes the list under the mutex and posts
// after unlocking. A thread that runs a single-thread client's connection runs that event loop
// while it waits instead (Driver).
#pragma once

#include "thread_semaphore.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

namespace agentd::detail {

class WaitList {
 public:
  WaitList() = default;
  WaitList(const WaitList&) = delete;
  WaitList& operator=(const WaitList&) = delete;

  // What a waker wakes: a sleeping thread's semaphore, or the event loop of a thread that runs
  // its client's connection while it waits (Driver). wake() may come from any thread.
  class Waiter {
   public:
    virtual void wake() = 0;

   protected:
    ~Waiter() = default;
  };

  // A thread that drives an event loop while it waits, instead of sleeping: a client made with
  // ClientOptions::single_thread runs its connection on the thread that made it
  // (session/thread_loop.h). Installed for that thread (thread_driver()) while such a client
  // lives; every wait on the thread then runs the loop until it is woken.
  class Driver {
   public:
    virtual ~Driver() noexcept(false) = default;  // as KJ objects' (an implementation holds some)
    // A waiter for one wait of this thread.
    class Wait : public Waiter {
     public:
      virtual ~Wait() noexcept(false) = default;
    };
    virtual std::unique_ptr<Wait> start() = 0;
    // Runs the loop until w is woken (true) or deadline passes (false).
    virtual bool drive(Wait& w, std::chrono::steady_clock::time_point deadline) = 0;
    // Returns once w's wake() has returned (a waker took w off the list as the wait ran out).
    virtual void settle(Wait& w) = 0;
  };
  // The calling thread's driver (null: its waits sleep).
  static Driver*& thread_driver();

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
    std::vector<Waiter*> waiters_;
  };
  // The mutex held: everyone waiting now.
  [[nodiscard]] Wake take_locked() {
    Wake w;
    w.waiters_.swap(waiting_);
    return w;
  }

 private:
  static std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout);
  // One wait: false when the deadline passed without a wake-up.
  bool wait_once(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline);
  bool drive_once(Driver& driver, std::unique_lock<std::mutex>& lock,
                  std::chrono::steady_clock::time_point deadline);
  // The mutex held: takes w off the list; false when a waker took it first.
  bool withdraw(Waiter* w);

  std::vector<Waiter*> waiting_;  // guarded by the caller's mutex
};

}  // namespace agentd::detail
