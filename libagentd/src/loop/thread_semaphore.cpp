#include "thread_semaphore.h"

#include <time.h>

#include <cerrno>

namespace agentd::detail {

void Semaphore::wait() {
  while (::sem_wait(&sem_) != 0) {
  }  // EINTR only
}

bool Semaphore::wait_until(std::chrono::steady_clock::time_point deadline) {
  // steady_clock is CLOCK_MONOTONIC on Linux.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
  const timespec at{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  for (;;) {
    if (::sem_clockwait(&sem_, CLOCK_MONOTONIC, &at) == 0) return true;
    if (errno != EINTR) return false;  // ETIMEDOUT
  }
}

}  // namespace agentd::detail
