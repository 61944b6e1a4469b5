// WorkerPool: grows while tasks block (up to max), shrinks back when idle, stop() drains.
#include "worker_pool.h"

#include "server_process.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

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

TEST_CASE("the pool never exceeds max_threads, and queued tasks run as threads free up", "[worker_pool]") {
  WorkerPool pool(1, 3);
  Gate gate;
  std::atomic<int> done{0};
  for (int i = 0; i < 6; ++i)
    pool.submit([&] {
      gate.pass();
      ++done;
    });
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
  pool.submit([&] {
    gate.pass();
    ++ran;
  });
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

TEST_CASE("a burst of short tasks runs them all without growing the pool far", "[worker_pool]") {
  WorkerPool pool(2, 256);
  constexpr int kTasks = 10000;
  std::atomic<int> ran{0};
  std::atomic<std::size_t> most_threads{0};
  for (int i = 0; i < kTasks; ++i) {
    pool.submit([&] { ++ran; });
    if (i % 100 == 0) most_threads = std::max(most_threads.load(), pool.threads());
  }
  CHECK(wait_until([&] { return ran.load() == kTasks; }, 30s));
  most_threads = std::max(most_threads.load(), pool.threads());
  // Tasks that never block are drained by the threads already there. A machine too busy to
  // run them for a few ms looks like starvation to the monitor, which then doubles the pool per
  // millisecond at most: never all of max_threads at once.
  CHECK(most_threads.load() <= 64);
  pool.stop();
  CHECK(ran == kTasks);
}

TEST_CASE("a burst submitted from several threads runs every task exactly once", "[worker_pool]") {
  WorkerPool pool(2, 64);
  constexpr int kSubmitters = 4;
  constexpr int kEach = 2500;
  std::vector<std::atomic<int>> hits(kSubmitters * kEach);
  std::vector<std::thread> submitters;
  for (int s = 0; s < kSubmitters; ++s)
    submitters.emplace_back([&, s] {
      for (int i = 0; i < kEach; ++i) pool.submit([&hits, k = s * kEach + i] { ++hits[k]; });
    });
  for (auto& t : submitters) t.join();
  pool.stop();  // runs whatever is still queued
  int wrong = 0;
  for (auto& h : hits)
    if (h.load() != 1) ++wrong;
  CHECK(wrong == 0);
}

TEST_CASE("tasks submitted while idle threads time out and leave all run, without stop()", "[worker_pool]") {
  // A 1 ms idle timeout with gaps of about that length between submits: wake-ups race with
  // threads timing out (a thread woken as its wait runs out must still take the task) and with
  // threads leaving and being replaced.
  WorkerPool pool(0, 8, 1ms);
  constexpr int kSubmitters = 3;
  constexpr int kEach = 400;
  std::atomic<int> ran{0};
  std::vector<std::thread> submitters;
  for (int s = 0; s < kSubmitters; ++s)
    submitters.emplace_back([&, s] {
      for (int i = 0; i < kEach; ++i) {
        pool.submit([&ran] { ++ran; });
        if ((i + s) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500 + 300 * s));
      }
    });
  for (auto& t : submitters) t.join();
  // Every task runs on the pool's own threads, not in stop().
  CHECK(wait_until([&] { return ran.load() == kSubmitters * kEach; }, 10s));
  pool.stop();
  CHECK(ran.load() == kSubmitters * kEach);
}

TEST_CASE("blocking tasks all run at once: the pool grows to max_threads, not beyond", "[worker_pool]") {
  WorkerPool pool(2, 40);
  Gate gate;
  std::atomic<int> done{0};
  for (int i = 0; i < 40; ++i)
    pool.submit([&] {
      gate.pass();
      ++done;
    });
  // 40 tasks blocked at once need 40 threads: 38 of them added through starvation.
  CHECK(gate.wait_inside(40));
  CHECK(pool.threads() == 40);
  CHECK(pool.busy() == 40);
  // More work while every thread is blocked waits: max_threads is a hard limit.
  for (int i = 0; i < 10; ++i) pool.submit([&] { ++done; });
  // Let the monitor see the starvation a good many times over.
  std::this_thread::sleep_for(50ms);
  CHECK(pool.threads() == 40);
  CHECK(done == 0);
  gate.release();
  CHECK(wait_until([&] { return done == 50; }, 10s));
  pool.stop();
}

TEST_CASE("a single task queued behind blocked threads gets a thread of its own", "[worker_pool]") {
  WorkerPool pool(2, 32);
  Gate gate;
  // One at a time: each new task finds every thread blocked and only itself queued.
  for (int i = 1; i <= 12; ++i) {
    pool.submit([&] { gate.pass(); });
    REQUIRE(gate.wait_inside(i));
  }
  CHECK(pool.threads() >= 12);
  CHECK(pool.threads() <= 32);
  gate.release();
  pool.stop();
}

TEST_CASE("growth for blocked tasks stops near what they need, far below max_threads", "[worker_pool]") {
  WorkerPool pool(2, 256);
  Gate gate;
  for (int i = 0; i < 8; ++i) pool.submit([&] { gate.pass(); });
  REQUIRE(gate.wait_inside(8));
  // Give a monitor that spawns again for tasks already handed a thread the chance to.
  std::this_thread::sleep_for(50ms);
  // 8 tasks need 8 threads: threads started but not yet at the queue count as taken, however
  // slowly they start on a loaded machine.
  CHECK(pool.threads() == 8);
  gate.release();
  pool.stop();
}

TEST_CASE("a stall shorter than starved_after does not grow the pool, a longer one does", "[worker_pool]") {
  // The lifecycle pool's case: constructors queued behind one that holds them up for a moment
  // (a garbage collection) get no threads; behind ones that stay blocked, they do.
  WorkerPool pool(1, 16, 30s, 1s);
  Gate gate;
  std::atomic<int> ran{0};
  pool.submit([&] { gate.pass(); });
  REQUIRE(gate.wait_inside(1));
  for (int i = 0; i < 20; ++i) pool.submit([&] { ++ran; });
  std::this_thread::sleep_for(50ms);  // 50 times the default starvation time
  CHECK(pool.threads() == 1);
  gate.release();
  CHECK(wait_until([&] { return ran.load() == 20; }, 10s));
  CHECK(pool.threads() == 1);

  Gate stuck;
  for (int i = 0; i < 2; ++i) pool.submit([&] { stuck.pass(); });
  CHECK(stuck.wait_inside(2));  // after about one starvation time, not never
  CHECK(pool.threads() >= 2);
  stuck.release();
  pool.stop();
}

TEST_CASE("stop runs every queued task, on all threads", "[worker_pool]") {
  std::atomic<int> ran{0};
  WorkerPool pool(4, 4);
  Gate gate;
  for (int i = 0; i < 4; ++i)
    pool.submit([&] {
      gate.pass();
      ++ran;
    });
  REQUIRE(gate.wait_inside(4));
  for (int i = 0; i < 1000; ++i) pool.submit([&] { ++ran; });
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);  // stop() is (most likely) waiting by now
    gate.release();
  });
  pool.stop();
  releaser.join();
  CHECK(ran == 1004);
  CHECK(pool.threads() == 0);
}

TEST_CASE("a pool with no minimum grows from zero threads", "[worker_pool]") {
  WorkerPool pool(0, 4, 50ms);
  CHECK(pool.threads() == 0);
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) pool.submit([&] { ++ran; });
  CHECK(wait_until([&] { return ran.load() == 100; }, 10s));
  // And shrinks back to none.
  CHECK(wait_until([&] { return pool.threads() == 0; }, 10s));
  pool.submit([&] { ++ran; });
  CHECK(wait_until([&] { return ran.load() == 101; }, 10s));
}

// With min_threads 0 no thread exists until the starvation monitor adds one; stop() must still
// run what was queued before it.
TEST_CASE("stop runs tasks queued on a pool that has no thread yet", "[worker_pool]") {
  int ran_total = 0;
  for (int i = 0; i < 20; ++i) {
    std::atomic<int> ran{0};
    WorkerPool pool(0, 4);
    pool.submit([&] { ++ran; });
    pool.stop();
    ran_total += ran.load();
  }
  CHECK(ran_total == 20);
}
