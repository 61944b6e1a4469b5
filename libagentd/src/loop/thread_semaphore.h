// Semaphore: a POSIX semaphore, for a thread that sleeps until another posts to it. It sleeps at
// once, where std::counting_semaphore (libstdc++) spins and calls sched_yield first, which costs
// a short hand-off more context switches than it saves. The worker pool's idle threads and the
// client's waiting threads (session/wait_list.h) each sleep on one.
#pragma once

#include <semaphore.h>

#include <chrono>

namespace agentd::detail {

class Semaphore {
 public:
  Semaphore() { ::sem_init(&sem_, 0, 0); }
  ~Semaphore() { ::sem_destroy(&sem_); }
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;

  // Any thread: one post, waking one wait.
  void post() { ::sem_post(&sem_); }
  // Until a post comes.
  void wait();
  // Until a post comes (true) or deadline passes (false).
  bool wait_until(std::chrono::steady_clock::time_point deadline);

 private:
  sem_t sem_;
};

}  // namespace agentd::detail
