// WorkerPool: grows while tasks block (up to max), shrinks back when idle, stop() drains.
#include "worker_pool.h"

#include "server_process.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>

using agentd::detail::WorkerPool;
using agentd::test::wait_until;
using namespace std::chrono_literals;

namespace {

// A gate blocking tasks until opened.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int inside = 0;
  void pass() {
    std::unique_lock lock(mu);
    ++inside;
    cv.notify_all();
    cv.wait_for(lock, 30s, [this] { return open; });
  }
  bool wait_inside(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 10s, [&] { return inside >= n; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("blocking tasks do not hold back others: the pool grows", "[worker_pool]") {
  WorkerPool pool(1, 16);
  Gate gate;
  for (int i = 0; i < 8; ++i) pool.submit([&] { gate.pass(); });
  // All 8 are blocked at once only if the pool grew to at least 8 threads.
  CHECK(gate.wait_inside(8));
  CHECK(pool.threads() >= 8);
  CHECK(pool.busy() >= 8);
  gate.release();
  pool.stop();
}

TEST_CASE("the pool never exceeds max_threads; queued tasks run as threads free up",
          "[worker_pool]") {
  WorkerPool pool(1, 3);
  Gate gate;
  std::atomic<int> done{0};
  for (int i = 0; i < 6; ++i) pool.submit([&] { gate.pass(); ++done; });
  CHECK(gate.wait_inside(3));
  CHECK(pool.threads() == 3);
  gate.release();
  CHECK(wait_until([&] { return done == 6; }, 10s));
  CHECK(pool.threads() <= 3);
}

TEST_CASE("extra threads leave after the idle timeout, down to the minimum", "[worker_pool]") {
  WorkerPool pool(1, 8, 50ms);
  Gate gate;
  for (int i = 0; i < 4; ++i) pool.submit([&] { gate.pass(); });
  REQUIRE(gate.wait_inside(4));
  gate.release();
  CHECK(wait_until([&] { return pool.threads() == 1; }, 10s));
  // Still works after shrinking.
  std::atomic<bool> ran{false};
  pool.submit([&] { ran = true; });
  CHECK(wait_until([&] { return ran.load(); }, 10s));
}

TEST_CASE("stop runs the queued tasks, joins, and drops later submissions", "[worker_pool]") {
  std::atomic<int> ran{0};
  WorkerPool pool(1, 1);
  Gate gate;
  pool.submit([&] { gate.pass(); ++ran; });
  for (int i = 0; i < 5; ++i) pool.submit([&] { ++ran; });
  REQUIRE(gate.wait_inside(1));
  std::thread releaser([&] { gate.release(); });
  pool.stop();
  releaser.join();
  CHECK(ran == 6);
  CHECK(pool.threads() == 0);
  pool.submit([&] { ++ran; });
  pool.stop();  // idempotent
  CHECK(ran == 6);
}
