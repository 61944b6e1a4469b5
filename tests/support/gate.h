// Gate: lets a test hold agent code (which runs on worker threads) until the test opens it.
// Open unless closed with set(false).
#pragma once

#include <condition_variable>
#include <mutex>

namespace agentd::test {

struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;

  // Blocks until the gate is open.
  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [this] { return open; });
  }
  void set(bool o) {
    {
      std::lock_guard lock(mu);
      open = o;
    }
    cv.notify_all();
  }
};

}  // namespace agentd::test
