// Task and LoopScheduler: coroutines that run on a KJ loop, await each other, timers and
// blocking work on workers, propagate exceptions, and can be destroyed while suspended.
#include "async_loop.h"

#include <agentd/error.h>
#include <agentd/task.h>

#include "bridge.h"
#include "worker_pool.h"

#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using agentd::Task;
using agentd::detail::Bridge;
using agentd::detail::LoopScheduler;
using agentd::detail::WorkerPool;
using namespace std::chrono_literals;

namespace {

class IgnoreLoopErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&&) override {}
};

struct Loop {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  IgnoreLoopErrors ignore;
  kj::TaskSet tasks{ignore};
  Bridge bridge{io.unixEventPort};
  WorkerPool workers{1, 4};
  LoopScheduler scheduler{io.provider->getTimer(), bridge, workers};
  Loop() { tasks.add(bridge.run()); }
  ~Loop() {
    bridge.close();
    workers.stop();
  }
  // Turns the loop until done holds (or 10 s pass).
  bool run_until(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(io.waitScope);
    }
    return true;
  }
};

// Runs task to its end on the loop's thread; the result lands in *out.
struct Runner {
  struct promise_type {
    Runner get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};
template <typename T>
Runner run(Task<T> task, std::optional<T>* out, std::string* error) {
  try {
    out->emplace(co_await std::move(task));
  } catch (const std::exception& e) {
    *error = e.what();
  }
}

Task<int> add(int a, int b) { co_return a + b; }

Task<int> count_up(int n) {
  // A chain of tasks that finish at once: each await must leave the stack as it found it, in
  // every build (unoptimised and sanitizer builds make no tail calls).
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += co_await add(1, 0);
  co_return sum;
}

Task<int> flag_then_seven(bool* started) {
  *started = true;
  co_return 7;
}

Task<std::string> sleeper(std::vector<std::string>* order, std::string name, std::chrono::milliseconds d) {
  co_await agentd::sleep_for(d);
  order->push_back(name);
  co_return name;
}

Task<int> thrower_after_sleep() {
  co_await agentd::sleep_for(1ms);
  throw std::runtime_error("boom after sleeping");
}

Task<int> offload(std::thread::id* worker, std::thread::id* resumed) {
  int v = co_await agentd::run_blocking([worker] {
    *worker = std::this_thread::get_id();
    return 41;
  });
  *resumed = std::this_thread::get_id();
  co_return v + 1;
}

Task<int> offload_throw() {
  co_return co_await agentd::run_blocking([]() -> int { throw std::runtime_error("on worker"); });
}

Task<int> sleep_then_flag(bool* resumed) {
  co_await agentd::sleep_for(5ms);
  *resumed = true;
  co_return 1;
}

// A frame the test owns and destroys while it is suspended.
struct Owned {
  struct promise_type {
    Owned get_return_object() { return Owned{std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  std::coroutine_handle<promise_type> h;
};
Owned hold(Task<int> t) { (void)co_await std::move(t); }

}  // namespace

TEST_CASE("tasks are lazy, await each other and return values", "[async]") {
  Loop loop;
  bool started = false;
  Task<int> lazy = flag_then_seven(&started);
  CHECK_FALSE(started);
  std::optional<int> out;
  std::string error;
  run(std::move(lazy), &out, &error);
  CHECK(started);
  CHECK(out == 7);
  std::optional<int> sum;
  run(count_up(1000000), &sum, &error);
  CHECK(sum == 1000000);
  CHECK(error.empty());
}

TEST_CASE("sleep_for resumes on the loop in deadline order, without holding a thread", "[async]") {
  Loop loop;
  std::vector<std::string> order;
  std::optional<std::string> a, b, c;
  std::string error;
  run(sleeper(&order, "slow", 60ms), &a, &error);
  run(sleeper(&order, "fast", 5ms), &b, &error);
  run(sleeper(&order, "mid", 30ms), &c, &error);
  CHECK(order.empty());  // all three suspended, none ran to its end inline
  REQUIRE(loop.run_until([&] { return a && b && c; }));
  CHECK(order == std::vector<std::string>{"fast", "mid", "slow"});
}

TEST_CASE("an exception thrown after a suspension reaches the awaiter", "[async]") {
  Loop loop;
  std::optional<int> out;
  std::string error;
  run(thrower_after_sleep(), &out, &error);
  REQUIRE(loop.run_until([&] { return !error.empty(); }));
  CHECK(error == "boom after sleeping");
  CHECK_FALSE(out);
}

TEST_CASE("run_blocking runs on a worker and resumes on the loop thread", "[async]") {
  Loop loop;
  const auto loop_thread = std::this_thread::get_id();
  std::thread::id worker_thread, resumed_thread;
  std::optional<int> out;
  std::string error;
  run(offload(&worker_thread, &resumed_thread), &out, &error);
  REQUIRE(loop.run_until([&] { return out.has_value(); }));
  CHECK(*out == 42);
  CHECK(worker_thread != loop_thread);
  CHECK(resumed_thread == loop_thread);
  // What the blocking function throws is rethrown in the coroutine.
  std::optional<int> never;
  run(offload_throw(), &never, &error);
  REQUIRE(loop.run_until([&] { return !error.empty(); }));
  CHECK(error == "on worker");
}

TEST_CASE("destroying a suspended task cancels what it awaits", "[async]") {
  Loop loop;
  bool resumed = false;
  Owned owner = hold(sleep_then_flag(&resumed));
  CHECK_FALSE(owner.h.done());
  owner.h.destroy();  // destroys the awaited task's frame with its pending timer
  auto until = std::chrono::steady_clock::now() + 40ms;
  loop.run_until([&] { return std::chrono::steady_clock::now() > until; });
  CHECK_FALSE(resumed);
}

TEST_CASE("asynchronous waits outside a server loop fail with a clear error", "[async]") {
  std::string error;
  std::thread([&error] {  // no LoopScheduler on this thread
    std::optional<std::string> out;
    std::vector<std::string> order;
    run(sleeper(&order, "x", 1ms), &out, &error);
  })
      .join();
  CHECK_THAT(error, Catch::Matchers::Contains("needs a server's event loop"));
}
