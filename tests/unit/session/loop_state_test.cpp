// The client connection's loop-thread state (session/loop_state.h) without a server: what a lost
// connection does to the calls waiting on it, what a connection gone for good does, and how a
// reconnection to another server is noticed. These decide what a program's get() reports: a
// call that may have run is never failed as if it had not, and a call not sent yet is not
// failed at all while a reconnect may still come.
#include "loop_state.h"

#include "test_names.h"

#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

using namespace agentd::test;
using agentd::detail::LoopState;
using agentd::detail::ResultSlot;
using agentd::detail::Ticket;
namespace detail = agentd::detail;
namespace wire = agentd::wire;

namespace {

std::optional<Error> error_of(ResultSlot& s) {
  std::lock_guard lock(s.mu);
  return s.error;
}

// A loop with four calls waiting: a reply sent (ticket 1), an observe sent (2), a reply not sent
// yet (3, in the batch) and a reply refused as overloaded waiting to go again (4).
struct Loop {
  Loop() {
    state.where = "127.0.0.1:7000";
    detail::set_server(state, "server-a");
    for (std::uint64_t t : {1, 3, 4}) {
      slots[t] = std::make_shared<ResultSlot>();
      state.tickets[t].slot = slots[t];
      state.tickets[t].call_id = "call-" + std::to_string(t);
    }
    state.tickets[2].on_fail = [this](const Error& e) { observe_error = e; };
    auto unsent = detail::spec_for(wire::CallKind::REPLY, "a");
    unsent.ticket = 3;
    state.batch.push_back(unsent);
    auto refused = detail::spec_for(wire::CallKind::REPLY, "a");
    refused.ticket = 4;
    state.retries.emplace(4, refused);
    state.dropped = {7};
    state.on_lost = [this] { ++lost; };
  }
  kj::AsyncIoContext io = kj::setupAsyncIo();
  LoopState state{io};
  std::map<std::uint64_t, std::shared_ptr<ResultSlot>> slots;
  std::optional<Error> observe_error;
  int lost = 0;
};

}  // namespace

TEST_CASE(
    "a lost connection keeps sent replies for a lookup, fails what cannot be looked up, and "
    "keeps what was not sent",
    "[session][loop_state]") {
  Loop l;
  l.state.look_up_lost_calls = true;
  const auto generation = l.state.generation;
  detail::connection_lost(l.state);

  CHECK(l.lost == 1);
  CHECK_FALSE(l.state.connected);
  CHECK(l.state.generation == generation + 1);  // late answers of the old connection are ignored
  CHECK(l.state.dropped.empty());               // the next session never heard of those tickets
  // The sent reply waits to be asked about by call id; it has not failed.
  REQUIRE(l.state.lost_calls.size() == 1);
  CHECK(l.state.lost_calls[0].call_id == "call-1");
  CHECK_FALSE(error_of(*l.slots[1]));
  // The sent observe has no call id to ask about: it may or may not have run, and says so.
  REQUIRE(l.observe_error);
  CHECK(l.observe_error->code() == ErrorCode::disconnected);
  CHECK(l.observe_error->retryable());
  CHECK_THAT(l.observe_error->message(),
             Contains("127.0.0.1:7000") && Contains("may or may not have been applied"));
  // The calls not sent yet still wait, with their tickets, for the reconnect.
  CHECK(l.state.tickets.count(3) == 1);
  CHECK(l.state.tickets.count(4) == 1);
  CHECK(l.state.tickets.count(1) == 0);
  CHECK_FALSE(error_of(*l.slots[3]));
  CHECK_FALSE(error_of(*l.slots[4]));
  CHECK(l.state.batch.size() == 1);
  CHECK(l.state.retries.size() == 1);

  // Told again before reconnecting (another call saw the same loss): nothing more happens.
  detail::connection_lost(l.state);
  CHECK(l.lost == 1);
  CHECK(l.state.generation == generation + 1);
  CHECK(l.state.lost_calls.size() == 1);
}

TEST_CASE("a lost connection without lookups (child mode) fails nothing before connection_down",
          "[session][loop_state]") {
  Loop l;
  detail::connection_lost(l.state);
  CHECK(l.lost == 1);
  CHECK(l.state.tickets.size() == 4);
  CHECK(l.state.lost_calls.empty());
  CHECK_FALSE(l.observe_error);
}

TEST_CASE(
    "a connection gone for good fails every waiting call with its error, and later calls at "
    "once",
    "[session][loop_state]") {
  Loop l;
  l.state.look_up_lost_calls = true;
  detail::connection_lost(l.state);
  auto pending_read = std::make_shared<ResultSlot>();
  l.state.pending_reads.emplace_back("call-9", pending_read);

  const Error down(ErrorCode::disconnected, "the child as_server exited with status 3");
  detail::connection_down(l.state, down);
  REQUIRE(l.state.down);
  CHECK(l.state.tickets.empty());
  CHECK(l.state.lost_calls.empty());
  CHECK(l.state.pending_reads.empty());
  CHECK(l.state.batch.empty());
  CHECK(l.state.retries.empty());
  for (std::uint64_t t : {1, 3, 4}) {
    INFO("ticket " << t);
    auto e = error_of(*l.slots[t]);
    REQUIRE(e);
    CHECK(e->message() == down.message());
  }
  REQUIRE(error_of(*pending_read));
  CHECK(error_of(*pending_read)->message() == down.message());

  // A call made afterwards fails at once with the same reason instead of waiting.
  auto req = l.state.session.readRequest();
  req.setCallId("call-10");
  std::string why;
  try {
    req.send().wait(l.io.waitScope);
  } catch (const kj::Exception& e) {
    why = e.getDescription().cStr();
  }
  CHECK_THAT(why, Contains("the child as_server exited with status 3"));
  // And a later loss is not a loss any more: no reconnect is started.
  detail::connection_lost(l.state);
  CHECK(l.lost == 1);
}

TEST_CASE("fail_tickets fails only the listed calls still waiting", "[session][loop_state]") {
  Loop l;
  detail::fail_tickets(l.state, {1, 2, 42}, Error(ErrorCode::overloaded, "refused"));
  REQUIRE(error_of(*l.slots[1]));
  CHECK(error_of(*l.slots[1])->code() == ErrorCode::overloaded);
  REQUIRE(l.observe_error);
  CHECK_FALSE(error_of(*l.slots[3]));
  CHECK(l.state.tickets.size() == 2);
}

TEST_CASE("a reconnection to another server id starts a new server epoch", "[session][loop_state]") {
  Loop l;
  const auto epoch = l.state.server_epoch;
  detail::set_server(l.state, "server-a");  // the same server again
  CHECK(l.state.server_epoch == epoch);
  detail::set_server(l.state, "server-b");
  CHECK(l.state.server_id == "server-b");
  CHECK(l.state.server_epoch == epoch + 1);
  detail::set_server(l.state, "server-a");
  CHECK(l.state.server_epoch == epoch + 2);
}
