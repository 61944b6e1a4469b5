#include "wait_list.h"

#include <algorithm>

namespace agentd::detail {

namespace {

// The calling thread's semaphore: it waits on one object at a time.
struct SemaphoreWaiter final : WaitList::Waiter {
  void wake() override { sem.post(); }
  Semaphore sem;
};

SemaphoreWaiter& my_waiter() {
  thread_local SemaphoreWaiter w;
  return w;
}

}  // namespace

WaitList::Driver*& WaitList::thread_driver() {
  thread_local Driver* driver = nullptr;
  return driver;
}

void WaitList::Wake::run() {
  for (Waiter* w : waiters_) w->wake();
  waiters_.clear();
}

std::chrono::steady_clock::time_point WaitList::deadline_after(std::chrono::milliseconds timeout) {
  // A timeout of years means "no timeout": compared in milliseconds, so that neither the
  // conversion to the clock's nanoseconds nor the sum overflows.
  constexpr std::chrono::milliseconds kLongest = std::chrono::hours(24 * 365 * 100);
  return std::chrono::steady_clock::now() + std::min(timeout, kLongest);
}

bool WaitList::withdraw(Waiter* w) {
  auto it = std::find(waiting_.begin(), waiting_.end(), w);
  if (it == waiting_.end()) return false;
  waiting_.erase(it);
  return true;
}

bool WaitList::wait_once(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline) {
  if (Driver* driver = thread_driver(); driver != nullptr) return drive_once(*driver, lock, deadline);
  SemaphoreWaiter* me = &my_waiter();
  waiting_.push_back(me);
  lock.unlock();
  const bool posted = me->sem.wait_until(deadline);
  lock.lock();
  if (posted) return true;
  if (withdraw(me)) return false;
  // A waker took this thread off the list as the wait ran out and posts after unlocking: take
  // that post now, so the semaphore is at zero for the thread's next wait.
  lock.unlock();
  me->sem.wait();
  lock.lock();
  return true;
}

bool WaitList::drive_once(Driver& driver, std::unique_lock<std::mutex>& lock,
                          std::chrono::steady_clock::time_point deadline) {
  std::unique_ptr<Driver::Wait> w = driver.start();
  waiting_.push_back(w.get());
  lock.unlock();
  const bool woken = driver.drive(*w, deadline);
  lock.lock();
  if (!woken && withdraw(w.get())) return false;
  // Woken, or taken off the list as the wait ran out: its wake() may still be running on the
  // waker's thread.
  lock.unlock();
  driver.settle(*w);
  lock.lock();
  return true;
}

}  // namespace agentd::detail
