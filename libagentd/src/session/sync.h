// Sync<T>: one blocking answer from the loop thread to a user thread.
#pragma once

#include <agentd/error.h>

#include "wait_list.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentd::detail {

// Settled once, by set() or fail() from any thread (in practice the loop thread); later settles
// are ignored. wait() is for the user thread that asked, never the loop thread. Shared (held by
// std::shared_ptr) between the waiter and the loop-thread code that settles it, so either may
// go first.
template <typename T>
struct Sync {
  std::mutex mu;
  WaitList waiters;            // threads in wait() (and, for a ResultSlot, in a chunk read)
  std::optional<T> value;      // guarded by mu
  std::optional<Error> error;  // guarded by mu
  // Run once settled, on the settling thread, without mu (coroutines awaiting a placeholder).
  std::vector<std::pair<std::uint64_t, std::function<void()>>> watchers;  // guarded by mu
  std::uint64_t next_watch = 1;                                           // guarded by mu

  void set(T v) {
    std::unique_lock lock(mu);
    if (value || error) return;
    value.emplace(std::move(v));
    settled(lock);
  }
  void fail(Error e) {
    std::unique_lock lock(mu);
    if (value || error) return;
    error.emplace(std::move(e));
    settled(lock);
  }

  // Any thread: fn runs once this is settled. Returns its id for unwatch(), or 0 (fn dropped,
  // not run) when it is settled already.
  std::uint64_t watch(std::function<void()> fn) {
    std::lock_guard lock(mu);
    if (value || error) return 0;
    watchers.emplace_back(next_watch, std::move(fn));
    return next_watch++;
  }
  // Any thread: drops a watcher that has not run.
  void unwatch(std::uint64_t id) {
    std::lock_guard lock(mu);
    for (auto it = watchers.begin(); it != watchers.end(); ++it)
      if (it->first == id) {
        watchers.erase(it);
        return;
      }
  }
  // Blocks until settled: returns the value or throws the Error; throws Error(timeout,
  // retryable) naming what after timeout. Takes the value: call once.
  T wait(std::chrono::milliseconds timeout, const std::string& what) {
    std::unique_lock lock(mu);
    if (!waiters.wait_for(lock, timeout, [this] { return value || error; }))
      throw Error(ErrorCode::timeout, fmt::format("{}: no answer within {} ms", what, timeout.count()));
    if (error) throw *error;
    return std::move(*value);
  }

 private:
  void settled(std::unique_lock<std::mutex>& lock) {
    auto run = std::move(watchers);
    watchers.clear();
    auto wake = waiters.take_locked();
    lock.unlock();
    wake.run();
    for (auto& [id, fn] : run) fn();
  }
};

}  // namespace agentd::detail
