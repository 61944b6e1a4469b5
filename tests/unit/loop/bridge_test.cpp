// Bridge: functions posted from any thread run on the loop thread, in each poster's order;
// posts after close() are dropped.
#include "bridge.h"

#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

using agentd::detail::Bridge;

namespace {
class Ignore final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&&) override {}
};
}  // namespace

TEST_CASE("posts from many threads all run on the loop thread, in per-thread order", "[bridge]") {
  auto io = kj::setupAsyncIo();
  Ignore ignore;
  kj::TaskSet tasks(ignore);
  Bridge bridge(io.unixEventPort);
  tasks.add(bridge.run());

  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  auto loop_thread = std::this_thread::get_id();
  std::vector<int> last(kThreads, -1);
  int total = 0;
  bool in_order = true;
  bool on_loop = true;
  auto paf = kj::newPromiseAndFulfiller<void>();
  auto* fulfiller = paf.fulfiller.get();

  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        bridge.post([&, t, i] {
          on_loop = on_loop && std::this_thread::get_id() == loop_thread;
          in_order = in_order && last[t] == i - 1;
          last[t] = i;
          if (++total == kThreads * kPerThread) fulfiller->fulfill();
        });
      }
    });
  }
  io.provider->getTimer().timeoutAfter(30 * kj::SECONDS, kj::mv(paf.promise)).wait(io.waitScope);
  for (auto& p : posters) p.join();
  CHECK(total == kThreads * kPerThread);
  CHECK(in_order);
  CHECK(on_loop);
}

TEST_CASE("posts after close never run, and the bridge destroys them on its own thread", "[bridge]") {
  auto io = kj::setupAsyncIo();
  Ignore ignore;
  auto tasks = kj::heap<kj::TaskSet>(ignore);
  auto bridge = std::make_unique<Bridge>(io.unixEventPort);
  tasks->add(bridge->run());
  bridge->close();
  auto alive = std::make_shared<int>(1);
  bool ran = false;
  std::thread([&, alive]() mutable { bridge->post([&ran, a = alive] { ran = true; }); }).join();
  io.waitScope.poll();
  CHECK_FALSE(ran);
  tasks = nullptr;  // stop draining, then destroy the bridge: it releases what the post held
  bridge.reset();
  CHECK_FALSE(ran);
  CHECK(alive.use_count() == 1);
}
