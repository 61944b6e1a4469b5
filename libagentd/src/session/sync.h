// Sync<T>: one blocking answer from the loop thread to a user thread.
#pragma once

#include <agentd/error.h>

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

namespace agentd::detail {

// Settled once, by set() or fail() from any thread (in practice the loop thread); later settles
// are ignored. wait() is for the user thread that asked, never the loop thread. Shared (held by
// std::shared_ptr) between the waiter and the loop-thread code that settles it, so either may
// go first.
template <typename T>
struct Sync {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<T> value;     // guarded by mu
  std::optional<Error> error;  // guarded by mu

  void set(T v) {
    {
      std::lock_guard lock(mu);
      if (value || error) return;
      value.emplace(std::move(v));
    }
    cv.notify_all();
  }
  void fail(Error e) {
    {
      std::lock_guard lock(mu);
      if (value || error) return;
      error.emplace(std::move(e));
    }
    cv.notify_all();
  }
  // Blocks until settled: returns the value or throws the Error; throws Error(timeout,
  // retryable) naming what after timeout. Takes the value: call once.
  T wait(std::chrono::milliseconds timeout, const std::string& what) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, timeout, [this] { return value || error; }))
      throw Error(ErrorCode::timeout,
                  fmt::format("{}: no answer within {} ms", what, timeout.count()));
    if (error) throw *error;
    return std::move(*value);
  }
};

}  // namespace agentd::detail
