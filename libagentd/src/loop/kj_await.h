// await_kj(promise): a kj::Promise awaited from asynchronous agent code (agentd/task.h) on the
// same loop. Library code uses it to give coroutines what the KJ side computes (HTTP model
// calls, ...). The coroutine resumes in a later loop turn with the value, or with the
// agentd::Error the promise rejected with (error_from_kj()). Destroying the suspended coroutine
// cancels the promise.
#pragma once

#include <agentd/task.h>

#include "async_loop.h"
#include "kj_errors.h"

#include <kj/async.h>
#include <kj/debug.h>

#include <coroutine>
#include <exception>
#include <optional>

namespace agentd::detail {

template <typename T>
class KjAwaiter {
 public:
  explicit KjAwaiter(kj::Promise<T> promise) : promise_(kj::mv(promise)) {}
  KjAwaiter(KjAwaiter&&) = default;

  bool await_ready() const noexcept { return false; }

  void await_suspend(std::coroutine_handle<> h) {
    auto& loop = require_async_loop("awaiting a KJ promise");
    auto* scheduler = dynamic_cast<LoopScheduler*>(&loop);
    KJ_REQUIRE(scheduler != nullptr, "await_kj needs the server's LoopScheduler");
    // The continuation writes into this awaiter only while it exists (alive), and resumes the
    // coroutine in a later turn: never from inside the continuation of a promise this awaiter
    // (through canceler_) still owns.
    scheduler->add_task(canceler_.wrap(kj::mv(promise_))
                            .then(
                                [this, h, scheduler, alive = flag_.alive](T&& v) {
                                  if (!*alive) return;
                                  value_.emplace(kj::mv(v));
                                  scheduler->resume(h, alive);
                                },
                                [this, h, scheduler, alive = flag_.alive](kj::Exception&& e) {
                                  if (!*alive) return;
                                  error_ = std::make_exception_ptr(error_from_kj(e));
                                  scheduler->resume(h, alive);
                                }));
  }

  T await_resume() {
    if (error_) std::rethrow_exception(error_);
    return kj::mv(*value_);
  }

 private:
  kj::Promise<T> promise_;
  std::optional<T> value_;
  std::exception_ptr error_;
  AliveFlag flag_;
  kj::Canceler canceler_;  // last: goes first, cancelling the promise while the rest is intact
};

template <typename T>
KjAwaiter<T> await_kj(kj::Promise<T> promise) {
  return KjAwaiter<T>(kj::mv(promise));
}

}  // namespace agentd::detail
