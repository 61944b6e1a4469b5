// Mailboxes: per-agent FIFO, a call waiting for its input holds back the calls behind it, an
// input that is an error fails the call without running it, the counts; Continuation: only an
// open, empty continuation of this thread takes a call.
#include "mailbox.h"

#include "test_names.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace agentd::test;
using namespace agentd::detail;

namespace {

struct Recorder {
  std::vector<std::string> dispatched;  // call ids, in dispatch order
  std::vector<std::pair<std::string, Error>> failed;
  Mailboxes boxes{Mailboxes::Hooks{
      [this](const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call) {
        CHECK(slot->busy);
        CHECK(slot->mailbox.front() == call);
        dispatched.push_back(call->call_id);
      },
      [this](std::shared_ptr<Call> call, Error e) { failed.emplace_back(call->call_id, std::move(e)); }}};
};

std::shared_ptr<AgentSlot> idle_slot() {
  auto s = std::make_shared<AgentSlot>();
  s->id = "a";
  s->busy = false;
  s->constructing = false;
  return s;
}

std::shared_ptr<Call> call(const std::string& id) {
  auto c = std::make_shared<Call>();
  c->call_id = id;
  return c;
}

}  // namespace

TEST_CASE("an agent's calls are dispatched one at a time in the order queued", "[mailbox]") {
  Recorder r;
  auto slot = idle_slot();
  for (const char* id : {"c1", "c2", "c3"}) {
    auto c = call(id);
    r.boxes.push(*slot, c);
    CHECK(c->enqueued.time_since_epoch().count() != 0);
    r.boxes.pump(slot);
  }
  CHECK(r.dispatched == std::vector<std::string>{"c1"});
  CHECK(r.boxes.queued() == 3);
  CHECK(r.boxes.running() == 1);
  CHECK(r.boxes.finish_head(*slot)->call_id == "c1");
  CHECK_FALSE(slot->busy);
  r.boxes.pump(slot);
  CHECK(r.dispatched == std::vector<std::string>{"c1", "c2"});
  r.boxes.finish_head(*slot);
  r.boxes.pump(slot);
  r.boxes.finish_head(*slot);
  r.boxes.pump(slot);
  CHECK(r.dispatched == std::vector<std::string>{"c1", "c2", "c3"});
  CHECK(r.boxes.queued() == 0);
  CHECK(r.boxes.running() == 0);
}

TEST_CASE("a call waiting for its input holds back the calls behind it", "[mailbox]") {
  Recorder r;
  auto slot = idle_slot();
  auto first = call("c1");
  first->input_ready = false;
  r.boxes.push(*slot, first);
  r.boxes.push(*slot, call("c2"));
  r.boxes.pump(slot);
  CHECK(r.dispatched.empty());
  CHECK_FALSE(slot->busy);
  first->input = std::make_shared<const Outcome>(Msg("u", "x"));
  first->input_ready = true;
  r.boxes.pump(slot);  // what the input's waiter does
  CHECK(r.dispatched == std::vector<std::string>{"c1"});
}

TEST_CASE("a call whose input failed fails without running, and the next one runs", "[mailbox]") {
  Recorder r;
  auto slot = idle_slot();
  auto bad = call("c1");
  bad->input = std::make_shared<const Outcome>(Error(ErrorCode::agent_failed, "upstream", "up"));
  r.boxes.push(*slot, bad);
  r.boxes.push(*slot, call("c2"));
  r.boxes.pump(slot);
  REQUIRE(r.failed.size() == 1);
  CHECK(r.failed[0].first == "c1");
  CHECK(r.failed[0].second.agent_id() == "up");
  CHECK(slot->failed == 1);
  CHECK(r.dispatched == std::vector<std::string>{"c2"});
  CHECK(r.boxes.queued() == 1);
}

TEST_CASE("taking the waiting calls leaves the running one at the head", "[mailbox]") {
  Recorder r;
  auto slot = idle_slot();
  for (const char* id : {"c1", "c2", "c3"}) r.boxes.push(*slot, call(id));
  r.boxes.pump(slot);
  auto waiting = r.boxes.take_waiting(*slot);
  REQUIRE(waiting.size() == 2);
  CHECK(waiting.front()->call_id == "c2");
  CHECK(slot->mailbox.size() == 1);
  CHECK(r.boxes.queued() == 1);
  // While the constructor runs (busy, constructing), every call is waiting.
  auto making = std::make_shared<AgentSlot>();
  r.boxes.push(*making, call("m1"));
  r.boxes.pump(making);
  CHECK(r.boxes.take_waiting(*making).size() == 1);
  CHECK(r.dispatched == std::vector<std::string>{"c1"});
}

TEST_CASE("only an open, empty continuation of this thread takes a call", "[mailbox]") {
  auto slot = idle_slot();
  auto c = call("c1");
  CHECK_FALSE(Continuation::take(slot, c));  // no continuation on this thread
  Continuation next;
  CHECK_FALSE(Continuation::take(slot, c));  // not open
  {
    Continuation::Window window;
    CHECK(Continuation::take(slot, c));
    CHECK_FALSE(slot);  // moved into the continuation
    auto other_slot = idle_slot();
    auto other = call("c2");
    CHECK_FALSE(Continuation::take(other_slot, other));  // already holds one
    CHECK(other);
  }
  CHECK(next.call->call_id == "c1");
  auto late_slot = idle_slot();
  auto late = call("c3");
  CHECK_FALSE(Continuation::take(late_slot, late));  // closed again
}
