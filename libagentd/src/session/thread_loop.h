// ThreadLoop: the KJ event loop of a thread that runs its clients' connections itself
// (ClientOptions::single_thread), with no loop thread to hand calls and answers over. The loop
// runs only while that thread waits (WaitList's driver: Placeholder::get(), a synchronous call,
// next_chunk()) or issues a call (kick()), so each synchronous call costs no thread hand-off on
// the client. One per thread, shared by the single-thread clients made on it.
#pragma once

#include "wait_list.h"

#include <kj/async-io.h>

#include <chrono>
#include <memory>
#include <thread>

namespace agentd::detail {

class ThreadLoop final : public WaitList::Driver {
 public:
  // The calling thread's loop: made on the first call, shared while any holder lives. Throws
  // Error(bad_request) when the thread already runs another KJ event loop.
  static std::shared_ptr<ThreadLoop> for_this_thread();
  ~ThreadLoop() noexcept(false) override;
  ThreadLoop(const ThreadLoop&) = delete;
  ThreadLoop& operator=(const ThreadLoop&) = delete;

  kj::AsyncIoContext& io() { return io_; }
  bool on_owner_thread() const { return std::this_thread::get_id() == owner_; }
  // True while this loop runs callbacks (on its thread): a wait there cannot run it again.
  bool running() const { return running_; }
  // On the owner thread, outside the loop's callbacks: runs what is ready now and sends what
  // is queued, without blocking (a call issued reaches the server at once). Else nothing.
  void kick();

  // WaitList::Driver.
  std::unique_ptr<Wait> start() override;
  bool drive(Wait& w, std::chrono::steady_clock::time_point deadline) override;
  void settle(Wait& w) override;

 private:
  ThreadLoop();
  kj::AsyncIoContext io_;
  std::thread::id owner_;
  bool running_ = false;
};

}  // namespace agentd::detail
