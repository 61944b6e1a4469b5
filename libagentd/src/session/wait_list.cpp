#include "wait_list.h"

#include <time.h>

#include <algorithm>
#include <cerrno>

namespace agentd::detail {

namespace {

// The calling thread's semaphore: it waits on one object at a time.
struct ThreadSemaphore {
  ThreadSemaphore() { ::sem_init(&sem, 0, 0); }
  ~ThreadSemaphore() { ::sem_destroy(&sem); }
  ThreadSemaphore(const ThreadSemaphore&) = delete;
  ThreadSemaphore& operator=(const ThreadSemaphore&) = delete;
  sem_t sem;
};

sem_t* my_semaphore() {
  thread_local ThreadSemaphore s;
  return &s.sem;
}

}  // namespace

void WaitList::Wake::run() {
  for (sem_t* s : sems_) ::sem_post(s);
  sems_.clear();
}

std::chrono::steady_clock::time_point WaitList::deadline_after(std::chrono::milliseconds timeout) {
  // A timeout of years means "no timeout": compared in milliseconds, so that neither the
  // conversion to the clock's nanoseconds nor the sum overflows.
  constexpr std::chrono::milliseconds kLongest = std::chrono::hours(24 * 365 * 100);
  return std::chrono::steady_clock::now() + std::min(timeout, kLongest);
}

bool WaitList::wait_once(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline) {
  sem_t* me = my_semaphore();
  waiting_.push_back(me);
  lock.unlock();
  // steady_clock is CLOCK_MONOTONIC on Linux.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
  const timespec at{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  int rc;
  do {
    rc = ::sem_clockwait(me, CLOCK_MONOTONIC, &at);
  } while (rc != 0 && errno == EINTR);
  lock.lock();
  if (rc == 0) return true;
  auto it = std::find(waiting_.begin(), waiting_.end(), me);
  if (it != waiting_.end()) {
    waiting_.erase(it);
    return false;
  }
  // A waker took this thread off the list as the wait ran out and posts after unlocking: take
  // that post now, so the semaphore is at zero for the thread's next wait.
  lock.unlock();
  while (::sem_wait(me) != 0) {
  }  // EINTR only
  lock.lock();
  return true;
}

}  // namespace agentd::detail
