#include "wait_list.h"

#include <algorithm>

namespace agentd::detail {

namespace {

// The calling thread's semaphore: it waits on one object at a time.
Semaphore& my_semaphore() {
  thread_local Semaphore s;
  return s;
}

}  // namespace

void WaitList::Wake::run() {
  for (Semaphore* s : sems_) s->post();
  sems_.clear();
}

std::chrono::steady_clock::time_point WaitList::deadline_after(std::chrono::milliseconds timeout) {
  // A timeout of years means "no timeout": compared in milliseconds, so that neither the
  // conversion to the clock's nanoseconds nor the sum overflows.
  constexpr std::chrono::milliseconds kLongest = std::chrono::hours(24 * 365 * 100);
  return std::chrono::steady_clock::now() + std::min(timeout, kLongest);
}

bool WaitList::wait_once(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline) {
  Semaphore* me = &my_semaphore();
  waiting_.push_back(me);
  lock.unlock();
  const bool posted = me->wait_until(deadline);
  lock.lock();
  if (posted) return true;
  auto it = std::find(waiting_.begin(), waiting_.end(), me);
  if (it != waiting_.end()) {
    waiting_.erase(it);
    return false;
  }
  // A waker took this thread off the list as the wait ran out and posts after unlocking: take
  // that post now, so the semaphore is at zero for the thread's next wait.
  lock.unlock();
  me->wait();
  lock.lock();
  return true;
}

}  // namespace agentd::detail
