// agentd::Task<T>: the coroutine type of asynchronous agent code (agentd::AsyncAgent), and the
// things such code waits on without holding a thread: agentd::sleep_for, agentd::run_blocking,
// a model's chat_async / stream_async (agentd/model.h) and another agent's placeholder
// (`co_await other.reply(x)`, agentd/client.h).
//
// Threading contract: asynchronous agent code runs on the hosting server's event-loop thread,
// between its suspensions. It must not block: a blocking call (a blocking model call, a file
// read, a long computation) stalls every connection of that server. Wait with co_await instead,
// or move blocking work to a worker thread with co_await agentd::run_blocking(fn).
//
// A Task is lazy: nothing runs until it is awaited (or the host starts it). It is awaited once,
// by one awaiter, and owns its coroutine frame: destroying an unfinished Task destroys the
// frame (and what it awaits, cancelling it).
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

namespace agentd {

template <typename T = void>
class Task;

namespace detail {

// The event loop asynchronous agent code runs on (one per server loop thread; implemented
// inside libagentd). Every resume happens on that loop thread, at the top of a loop turn, never
// inside the caller of resume(). A resume whose `alive` flag has been cleared by then (its
// awaiter was destroyed with its frame) does nothing.
class AsyncLoop {
 public:
  virtual ~AsyncLoop() = default;
  // Any thread.
  virtual void resume(std::coroutine_handle<> h, std::shared_ptr<bool> alive) = 0;
  // Loop thread.
  virtual void resume_after(std::chrono::nanoseconds delay, std::coroutine_handle<> h,
                            std::shared_ptr<bool> alive) = 0;
  // Loop thread: runs fn on a worker thread, then resumes h.
  virtual void run_blocking(std::function<void()> fn, std::coroutine_handle<> h,
                            std::shared_ptr<bool> alive) = 0;
  // Any thread: runs fn on the loop thread (after what was posted before it).
  virtual void post(std::function<void()> fn) = 0;
  // Whether the calling thread is this loop's.
  virtual bool on_loop_thread() const = 0;
};

// The loop of the calling thread, or null when it runs none (then the awaitables below throw
// agentd::Error(bad_request) saying asynchronous code needs a server loop).
AsyncLoop* current_async_loop();
// Throws that error when there is no loop.
AsyncLoop& require_async_loop(const char* what);

template <typename T>
class TaskPromise;

// How a task and the coroutine awaiting it hand over. The awaiter starts the task inside its
// await_suspend: a task that finishes before its first suspension leaves the awaiter running on
// (await_suspend returns false) instead of resuming it from the task's final suspend, so a chain
// of immediately-finished awaits keeps the stack flat whether or not the compiler makes symmetric
// transfer a tail call (GCC does only when optimising). A task that suspends resumes its awaiter
// when it finishes, by symmetric transfer from whatever resumed the task.
enum class Handover : unsigned char { idle, starting, suspended, done };

struct FinalAwaiter {
  bool await_ready() const noexcept { return false; }
  template <typename P>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
    auto& p = h.promise();
    // Finished while the awaiter is still starting it: the awaiter carries on by itself.
    if (p.handover_.exchange(Handover::done) == Handover::starting) return std::noop_coroutine();
    auto next = p.continuation_;
    return next ? next : std::noop_coroutine();
  }
  void await_resume() const noexcept {}
};

class TaskPromiseBase {
 public:
  std::suspend_always initial_suspend() const noexcept { return {}; }
  FinalAwaiter final_suspend() const noexcept { return {}; }
  void unhandled_exception() noexcept { error_ = std::current_exception(); }

 protected:
  friend struct FinalAwaiter;
  template <typename U>
  friend class agentd::Task;
  std::coroutine_handle<> continuation_;
  std::atomic<Handover> handover_{Handover::idle};
  std::exception_ptr error_;
};

template <typename T>
class TaskPromise : public TaskPromiseBase {
 public:
  Task<T> get_return_object() noexcept;
  template <typename U>
  void return_value(U&& v) {
    value_.emplace(std::forward<U>(v));
  }
  T take() {
    if (error_) std::rethrow_exception(error_);
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
};

template <>
class TaskPromise<void> : public TaskPromiseBase {
 public:
  Task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() {
    if (error_) std::rethrow_exception(error_);
  }
};

// Clears an awaiter's alive flag when the awaiter (and so its coroutine frame) goes.
struct AliveFlag {
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  AliveFlag() = default;
  AliveFlag(const AliveFlag&) = delete;
  AliveFlag& operator=(const AliveFlag&) = delete;
  ~AliveFlag() { *alive = false; }
};

}  // namespace detail

template <typename T>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::TaskPromise<T>;
  using value_type = T;

  Task() = default;
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  bool valid() const { return static_cast<bool>(h_); }

  // co_await task: runs it (it starts now) and yields its value or rethrows its exception.
  auto operator co_await() && noexcept {
    struct Awaiter {
      std::coroutine_handle<promise_type> h;
      bool await_ready() const noexcept { return !h || h.done(); }
      // Starts the task here; false (do not suspend) when it finished before suspending.
      bool await_suspend(std::coroutine_handle<> awaiting) noexcept {
        auto& p = h.promise();
        p.continuation_ = awaiting;
        p.handover_.store(detail::Handover::starting);
        h.resume();
        return p.handover_.exchange(detail::Handover::suspended) != detail::Handover::done;
      }
      T await_resume() { return h.promise().take(); }
    };
    return Awaiter{h_};
  }

 private:
  friend class detail::TaskPromise<T>;
  explicit Task(std::coroutine_handle<promise_type> h) : h_(h) {}
  void reset() {
    if (h_) std::exchange(h_, {}).destroy();
  }
  std::coroutine_handle<promise_type> h_;
};

namespace detail {

template <typename T>
Task<T> TaskPromise<T>::get_return_object() noexcept {
  return Task<T>(std::coroutine_handle<TaskPromise<T>>::from_promise(*this));
}
inline Task<void> TaskPromise<void>::get_return_object() noexcept {
  return Task<void>(std::coroutine_handle<TaskPromise<void>>::from_promise(*this));
}

struct SleepAwaiter {
  std::chrono::nanoseconds delay;
  AliveFlag flag;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    require_async_loop("agentd::sleep_for").resume_after(delay, h, flag.alive);
  }
  void await_resume() const noexcept {}
};

template <typename T>
struct BlockingAwaiter {
  // Shared with the worker: the frame (and this awaiter) may go while fn still runs.
  struct State {
    std::function<T()> fn;
    std::conditional_t<std::is_void_v<T>, bool, std::optional<T>> value{};
    std::exception_ptr error;
  };
  std::shared_ptr<State> state;
  AliveFlag flag;

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    require_async_loop("agentd::run_blocking")
        .run_blocking(
            [st = state] {
              try {
                if constexpr (std::is_void_v<T>) {
                  st->fn();
                } else {
                  st->value.emplace(st->fn());
                }
              } catch (...) {
                st->error = std::current_exception();
              }
            },
            h, flag.alive);
  }
  T await_resume() {
    if (state->error) std::rethrow_exception(state->error);
    if constexpr (!std::is_void_v<T>) return std::move(*state->value);
  }
};

}  // namespace detail

// Suspends the calling coroutine for d without holding a thread (a timer on the loop).
inline detail::SleepAwaiter sleep_for(std::chrono::nanoseconds d) { return detail::SleepAwaiter{d, {}}; }

// Runs fn (blocking code: a file, a library without an asynchronous API, heavy computation) on
// the server's worker pool and resumes with its result (or rethrows what it threw) back on the
// loop thread. The coroutine stays suspended, so its agent still runs one call at a time.
template <typename F>
auto run_blocking(F fn) {
  using T = std::invoke_result_t<F&>;
  using State = typename detail::BlockingAwaiter<T>::State;
  return detail::BlockingAwaiter<T>{std::make_shared<State>(State{std::move(fn), {}, {}}), {}};
}

}  // namespace agentd
