// CallWatch's calls in progress: counted while dispatched, reported slow once past the threshold,
// and forgotten when done, whatever the order; a done() for a call the watch does not hold (one
// finished before, or dispatched under an earlier watch) leaves the others alone.
#include "call_watch.h"

#include "mailbox.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

using namespace agentd::detail;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<AgentSlot> slot_named(const std::string& id) {
  auto s = std::make_shared<AgentSlot>();
  s->id = id;
  return s;
}

std::shared_ptr<Call> call_named(const std::string& id) {
  auto c = std::make_shared<Call>();
  c->call_id = id;
  return c;
}

// The call ids of what take_newly_slow() reported, sorted.
std::vector<std::string> ids(const std::vector<CallWatch::Slow>& slow) {
  std::vector<std::string> out;
  for (const auto& s : slow) out.push_back(s.call->call_id);
  std::sort(out.begin(), out.end());
  return out;
}

// A watch whose thread does nothing (the test calls what its tick would).
std::unique_ptr<CallWatch> idle_watch() {
  return std::make_unique<CallWatch>(std::chrono::milliseconds(3600 * 1000),
                                     [](CallWatch::Clock::time_point) {});
}

}  // namespace

TEST_CASE("a watch counts its calls in progress and reports each slow one once, finished in any order",
          "[call_watch]") {
  auto watch = idle_watch();
  const auto t0 = CallWatch::Clock::now();
  auto slot = slot_named("agent");
  auto a = call_named("a"), b = call_named("b"), c = call_named("c");
  watch->dispatched(slot, a, t0);
  watch->dispatched(slot, b, t0 + 1s);
  watch->dispatched(slot, c, t0 + 2s);
  CHECK(watch->in_progress() == 3);

  watch->done(*b);  // from the middle
  CHECK(watch->in_progress() == 2);
  auto slow = watch->take_newly_slow(t0 + 2500ms, 1s);
  CHECK(ids(slow) == std::vector<std::string>{"a"});  // b finished, c is 0.5 s old
  REQUIRE(slow.size() == 1);
  CHECK(slow[0].slot->id == "agent");
  CHECK(slow[0].in_progress == 2500ms);
  CHECK(watch->slow_now() == 1);
  CHECK(watch->take_newly_slow(t0 + 2600ms, 1s).empty());  // a once only

  // d takes the place b left; b's second done() must not take d out.
  auto d = call_named("d");
  watch->dispatched(slot, d, t0 + 3s);
  CHECK(watch->in_progress() == 3);
  watch->done(*b);
  CHECK(watch->in_progress() == 3);

  watch->done(*a);
  CHECK(watch->slow_now() == 0);
  CHECK(ids(watch->take_newly_slow(t0 + 10s, 1s)) == std::vector<std::string>{"c", "d"});
  CHECK(watch->slow_now() == 2);
  watch->done(*d);
  watch->done(*c);
  CHECK(watch->in_progress() == 0);
  CHECK(watch->slow_now() == 0);
  slow.clear();
  CHECK(a.use_count() == 1);  // the watch keeps no call it no longer holds
  CHECK(d.use_count() == 1);

  // Dispatched again once empty: counted afresh.
  watch->dispatched(slot, a, t0 + 20s);
  CHECK(watch->in_progress() == 1);
  CHECK(ids(watch->take_newly_slow(t0 + 30s, 1s)) == std::vector<std::string>{"a"});
  watch->done(*a);
  CHECK(watch->in_progress() == 0);
}

TEST_CASE("a call dispatched under an earlier watch does not touch a new watch's calls", "[call_watch]") {
  auto slot = slot_named("agent");
  auto old_call = call_named("old");
  const auto t0 = CallWatch::Clock::now();
  {
    auto earlier = idle_watch();
    earlier->dispatched(slot, old_call, t0);
  }  // replaced (AgentHost::set_watch) with the call still in progress
  auto watch = idle_watch();
  auto fresh = call_named("fresh");
  watch->dispatched(slot, fresh, t0);  // the entry old_call's index names
  watch->done(*old_call);
  CHECK(watch->in_progress() == 1);
  CHECK(ids(watch->take_newly_slow(t0 + 5s, 1s)) == std::vector<std::string>{"fresh"});
  watch->done(*fresh);
  CHECK(watch->in_progress() == 0);
}
