// Bridge: the one way into a KJ event-loop thread from other threads (agent workers, user
// threads calling the client API). Functions posted from any thread run on the loop thread, in
// the order they were posted, batched per wake-up (one eventfd write per batch).
#pragma once

#include <kj/async-unix.h>
#include <kj/function.h>
#include <kj/io.h>

#include <mutex>
#include <vector>

namespace agentd::detail {

class Bridge {
 public:
  // Construct on the loop thread; port is that thread's event port and outlives the bridge.
  explicit Bridge(kj::UnixEventPort& port);
  ~Bridge();
  Bridge(const Bridge&) = delete;
  Bridge& operator=(const Bridge&) = delete;

  // Any thread. fn runs on the loop thread while run() is being awaited; posts after close()
  // never run and are destroyed with the bridge (on the loop thread).
  void post(kj::Function<void()> fn);

  // Loop thread: drains posted functions until the returned promise is cancelled.
  kj::Promise<void> run();

  // Any thread: refuse further posts. Functions already queued still run if run() continues.
  void close();

  // Loop thread: runs what is queued now (and what that posts meanwhile) until the queue is empty,
  // and clears the signal. run() calls it on each wake-up; an owner shutting down calls it
  // directly, so that nothing posted before it stopped posts is lost.
  void run_queued();

 private:
  kj::Promise<void> drain_loop();

  kj::AutoCloseFd fd_;  // declared before observer_, which must go first
  kj::UnixEventPort::FdObserver observer_;
  std::mutex mu_;
  std::vector<kj::Function<void()>> queue_;
  bool signaled_ = false;
  bool closed_ = false;
};

}  // namespace agentd::detail
