// WaitList: what a program thread blocked in get() relies on: it wakes when its result lands,
// never misses a wake-up, and times out when nothing comes.
#include "wait_list.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

using agentd::detail::WaitList;
using namespace std::chrono_literals;

TEST_CASE("a waiter wakes when the state it waits for is set, and times out when it is not", "[wait_list]") {
  std::mutex mu;
  WaitList waiters;
  bool ready = false;
  {
    std::unique_lock lock(mu);
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(waiters.wait_for(lock, 30ms, [&] { return ready; }));
    CHECK(std::chrono::steady_clock::now() - start >= 30ms);
  }
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    WaitList::Wake wake;
    {
      std::lock_guard lock(mu);
      ready = true;
      wake = waiters.take_locked();
    }
    wake.run();
  });
  std::unique_lock lock(mu);
  // "No timeout" spelled as the largest duration waits, and wakes, like any other.
  CHECK(waiters.wait_for(lock, std::chrono::milliseconds::max(), [&] { return ready; }));
  lock.unlock();
  setter.join();
}

TEST_CASE("two threads handing a turn back and forth never lose a wake-up, even racing timeouts",
          "[wait_list]") {
  // Every other round waits with a timeout short enough to race the other thread's wake-up (a
  // wake taken as the wait runs out, which leaves a post for a later wait); the rounds between
  // wait 10 s, so a wake-up lost after such a race shows as a wait that timed out.
  std::mutex mu;
  WaitList waiters;
  int turn = 0;
  constexpr int kRounds = 5000;
  std::atomic<int> lost{0};
  auto play = [&](int me) {
    for (int i = 0; i < kRounds; ++i) {
      std::unique_lock lock(mu);
      auto mine = [&] { return turn == me; };
      if (i % 2 == 0) {
        while (!waiters.wait_for(lock, std::chrono::milliseconds(i % 4 == 0 ? 0 : 1), mine)) {
        }
      } else if (!waiters.wait_for(lock, 10s, mine)) {
        ++lost;
        continue;
      }
      turn = 1 - me;
      auto wake = waiters.take_locked();
      lock.unlock();
      wake.run();
    }
  };
  std::thread other(play, 1);
  play(0);
  other.join();
  CHECK(lost.load() == 0);
  CHECK(turn == 0);
}
