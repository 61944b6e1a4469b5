// What becomes of a call's answer on the client's loop (session/call_done.h), without a server:
// CallDone messages built by hand are dispatched to tickets, and a call lost in a reconnect that
// the server no longer knows is classified by unknown_lost_call. The classification is what a
// program decides a retry on: not_applied (safe to retry) only when the call cannot have run;
// interrupted when the server came back as another one; expired when the server may have run it
// and forgotten it.
#include "call_done.h"

#include "loop_state.h"
#include "value_codec.h"
#include "test_names.h"

#include <capnp/message.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <chrono>
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

struct DoneLoop {
  DoneLoop() {
    state.where = "127.0.0.1:7000";
    detail::set_server(state, "server-a");
  }
  kj::AsyncIoContext io = kj::setupAsyncIo();
  LoopState state{io};
};

// A reply's ticket, sent sent_ago ago to the server of epoch.
Ticket lost_reply(const std::string& call_id, std::chrono::milliseconds sent_ago, std::uint64_t epoch = 0) {
  Ticket t;
  t.slot = std::make_shared<ResultSlot>();
  t.call_id = call_id;
  t.sent = std::chrono::steady_clock::now() - sent_ago;
  t.server_epoch = epoch;
  return t;
}

std::optional<Msg> value_of(ResultSlot& s) {
  std::lock_guard lock(s.mu);
  return s.value;
}
std::optional<Error> slot_error(ResultSlot& s) {
  std::lock_guard lock(s.mu);
  return s.error;
}
bool ended(ResultSlot& s) {
  std::lock_guard lock(s.mu);
  return s.stream_ended;
}

}  // namespace

TEST_CASE(
    "a lost call the server does not know was not applied when it was sent after the "
    "server's forgotten horizon",
    "[session][call_done]") {
  DoneLoop l;
  // Sent a second ago; the server forgot only calls that finished a minute ago or earlier.
  Error e = detail::unknown_lost_call(l.state, lost_reply("call-1", std::chrono::seconds(1)), 60000);
  CHECK(e.code() == ErrorCode::not_applied);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("call-1") && Contains("127.0.0.1:7000") && Contains("safe to retry") &&
                              !Contains("not safe"));
  // A server that never forgot a call: unknown means never started, however long ago it was sent.
  Error never = detail::unknown_lost_call(l.state, lost_reply("call-2", std::chrono::hours(5)), -1);
  CHECK(never.code() == ErrorCode::not_applied);
  CHECK(never.retryable());
}

TEST_CASE("a lost call sent before the server's forgotten horizon has expired: it may have run",
          "[session][call_done]") {
  DoneLoop l;
  Error e = detail::unknown_lost_call(l.state, lost_reply("call-1", std::chrono::seconds(10)), 5000);
  CHECK(e.code() == ErrorCode::expired);
  CHECK_FALSE(e.retryable());
  CHECK_THAT(e.message(), Contains("call-1") && Contains("127.0.0.1:7000") &&
                              Contains("may have been applied") && Contains("not safe to retry") &&
                              Contains("--max-pool-size"));
  // Sent just after the horizon, but within the margin for the time the call took to reach the
  // server: it cannot be told apart, so it is not called safe.
  Error close = detail::unknown_lost_call(l.state, lost_reply("call-2", std::chrono::milliseconds(0)), 500);
  CHECK(close.code() == ErrorCode::expired);
  Error outside =
      detail::unknown_lost_call(l.state, lost_reply("call-3", std::chrono::milliseconds(0)), 5000);
  CHECK(outside.code() == ErrorCode::not_applied);
}

TEST_CASE("a lost call is interrupted when the server came back as another one", "[session][call_done]") {
  DoneLoop l;
  const Ticket t = lost_reply("call-1", std::chrono::seconds(1), l.state.server_epoch);
  // The reconnection reached the same server: its answer counts.
  detail::set_server(l.state, "server-a");
  CHECK(detail::unknown_lost_call(l.state, t, -1).code() == ErrorCode::not_applied);
  // Another server id (a restart without its state dir): the old one may have been running it.
  detail::set_server(l.state, "server-b");
  Error e = detail::unknown_lost_call(l.state, t, -1);
  CHECK(e.code() == ErrorCode::interrupted);
  CHECK_FALSE(e.retryable());
  CHECK_THAT(e.message(),
             Contains("call-1") && Contains("server-b") && Contains("not safe to retry blindly"));
  // Whatever the server's horizon says.
  CHECK(detail::unknown_lost_call(l.state, t, 60000).code() == ErrorCode::interrupted);
}

TEST_CASE(
    "each CallDone redeems its ticket once, and an answer that cannot be read fails its call "
    "alone",
    "[session][call_done]") {
  DoneLoop l;
  auto ok = std::make_shared<ResultSlot>();
  auto failed = std::make_shared<ResultSlot>();
  auto unreadable = std::make_shared<ResultSlot>();
  int observed = 0;
  std::optional<Error> observe_failed;
  l.state.tickets[1].slot = ok;
  l.state.tickets[2].slot = failed;
  l.state.tickets[3].slot = unreadable;
  l.state.tickets[4].on_done = [&observed](wire::CallDone::Reader d) {
    ++observed;
    CHECK(d.isDone());
  };
  l.state.tickets[4].on_fail = [&observe_failed](const Error& e) { observe_failed = e; };

  capnp::MallocMessageBuilder message;
  auto calls = message.initRoot<wire::CallSink::DoneParams>().initCalls(5);
  calls[0].setTicket(1);
  detail::write_msg(Msg("a", "the answer"), calls[0].initOutcome().initMsg());
  calls[1].setTicket(2);
  detail::write_error(Error(ErrorCode::agent_failed, "it threw", "a"), calls[1].initError());
  calls[2].setTicket(3);
  auto bad = calls[2].initOutcome().initMsg();
  detail::write_msg(Msg("a", "fine"), bad);
  bad.setName(kj::StringPtr("\xff\xfe"));  // not UTF-8
  calls[3].setTicket(4);
  calls[3].setDone();
  calls[4].setTicket(99);  // failed already (or never ours): ignored
  calls[4].setDone();
  for (auto d : calls.asReader()) detail::dispatch_done(l.state, d);

  CHECK(l.state.tickets.empty());
  REQUIRE(value_of(*ok));
  CHECK(value_of(*ok)->text() == "the answer");
  CHECK(ended(*ok));
  REQUIRE(slot_error(*failed));
  CHECK(slot_error(*failed)->code() == ErrorCode::agent_failed);
  CHECK(slot_error(*failed)->message() == "it threw");
  CHECK(ended(*failed));
  REQUIRE(slot_error(*unreadable));
  CHECK(slot_error(*unreadable)->code() == ErrorCode::bad_request);
  CHECK_THAT(
      slot_error(*unreadable)->message(),
      Contains("the answer from as_server at 127.0.0.1:7000 could not be read") && Contains("not UTF-8"));
  CHECK(observed == 1);
  CHECK_FALSE(observe_failed);

  // The same answers again (a duplicate): nothing changes.
  for (auto d : calls.asReader()) detail::dispatch_done(l.state, d);
  CHECK(observed == 1);
  CHECK(value_of(*ok)->text() == "the answer");
}
