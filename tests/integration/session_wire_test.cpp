// The Session / CallSink wire contract driven directly (a raw login, Session.submit with
// CallSpecs, a recording CallSink): every ticket reported with the right outcome, unreported
// replies kept in the pool, calls queued behind a failing create failing with its error.
#include "blob.h"
#include "raw_login.h"
#include "server_process.h"
#include "value_codec.h"
#include "test_names.h"

#include <agentd/client.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <error_of.h>
#include <kj/async-io.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;

namespace {

// One CallDone, decoded (its reader dies with the message).
struct Done {
  std::string what;  // msg, outcome_error, too_large, value, value_error, memory, error, done, created
  std::optional<Msg> msg;
  std::optional<Error> error;
  std::uint64_t too_large = 0;
  Value value;
  std::vector<Msg> memory;
  std::string created;
};

Done decode(agentd::wire::CallDone::Reader d) {
  using agentd::wire::CallDone;
  using agentd::wire::Outcome;
  namespace detail = agentd::detail;
  Done out;
  switch (d.which()) {
    case CallDone::OUTCOME: {
      auto o = d.getOutcome();
      switch (o.which()) {
        case Outcome::MSG:
          out.what = "msg";
          out.msg = detail::read_msg(o.getMsg());
          break;
        case Outcome::ERROR:
          out.what = "outcome_error";
          out.error = detail::read_error(o.getError());
          break;
        case Outcome::TOO_LARGE:
          out.what = "too_large";
          out.too_large = o.getTooLarge();
          break;
      }
      break;
    }
    case CallDone::VALUE:
      if (d.getValue().isError()) {
        out.what = "value_error";
        out.error = detail::read_error(d.getValue().getError());
      } else {
        out.what = "value";
        out.value = detail::read_value(d.getValue().getValue());
      }
      break;
    case CallDone::MEMORY:
      out.what = "memory";
      for (auto m : d.getMemory()) out.memory.push_back(detail::read_msg(m));
      break;
    case CallDone::ERROR:
      out.what = "error";
      out.error = detail::read_error(d.getError());
      break;
    case CallDone::DONE:
      out.what = "done";
      break;
    case CallDone::CREATED:
      out.what = "created";
      out.created = detail::to_std(d.getCreated());
      break;
  }
  return out;
}

// What the test's sink has been told.
struct Received {
  std::map<std::uint64_t, std::vector<Done>> by_ticket;
  std::size_t calls = 0;    // CallDone entries
  std::size_t batches = 0;  // CallSink.done messages
  std::size_t want = 0;     // fulfil all_in once calls reaches this
  kj::Own<kj::PromiseFulfiller<void>> all_in;
};

class RecordingSink final : public agentd::wire::CallSink::Server {
 public:
  explicit RecordingSink(Received& r) : r_(r) {}
  kj::Promise<void> done(DoneContext context) override {
    ++r_.batches;
    for (auto d : context.getParams().getCalls()) {
      r_.by_ticket[d.getTicket()].push_back(decode(d));
      ++r_.calls;
    }
    if (r_.calls >= r_.want && r_.all_in && r_.all_in->isWaiting()) r_.all_in->fulfill();
    return kj::READY_NOW;
  }

 private:
  Received& r_;  // outlives the RPC system (declared before it in the test)
};

struct Spec {
  agentd::wire::CallKind kind{};
  std::string agent_id{};
  std::string call_id{};
  std::optional<Msg> msg{};
  std::string method{};
  std::string class_name{};
  std::string name{};
  std::uint64_t inline_limit = 0;
};

void fill(const Spec& s, std::uint64_t ticket, agentd::wire::CallSpec::Builder out) {
  out.setTicket(ticket);
  out.setKind(s.kind);
  out.setAgentId(agentd::detail::to_kj(s.agent_id));
  out.setCallId(agentd::detail::to_kj(s.call_id));
  out.setMethod(agentd::detail::to_kj(s.method));
  out.setClassName(agentd::detail::to_kj(s.class_name));
  out.setName(agentd::detail::to_kj(s.name));
  out.setInlineLimit(s.inline_limit);
  out.initArgs().initObject(0);
  if (s.msg) agentd::detail::write_msg(*s.msg, out.initInput().initMsg());
}

// A raw Cap'n Proto connection to server s with a session whose sink records into rec (which
// must outlive this).
struct WireSession {
  WireSession(ServerProcess& s, Received& rec)
      : stream(io.provider->getNetwork()
                   .parseAddress("127.0.0.1", s.port())
                   .wait(io.waitScope)
                   ->connect()
                   .wait(io.waitScope)),
        rpc(*stream),
        server(agentd::test::raw_login(rpc)) {
    auto open = server.sessionRequest();
    open.setSink(kj::heap<RecordingSink>(rec));
    session = open.send().getSession();
  }
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyClient rpc;
  agentd::wire::AgentServer::Client server;
  agentd::wire::Session::Client session = nullptr;
};

}  // namespace

TEST_CASE("Session.submit reports every ticket through the sink with the right outcome", "[batch][wire]") {
  using agentd::wire::CallKind;
  auto s = ServerProcess::start(standard_args());
  Received rec;  // before the RPC system, so the sink's reference outlives it
  WireSession w(*s, rec);
  auto& ws = w.io.waitScope;
  auto& timer = w.io.provider->getTimer();
  auto& session = w.session;

  // Sends specs (tickets first_ticket, first_ticket + 1, ...) in one submit and waits until the
  // sink has heard of want calls in all.
  auto submit = [&](const std::vector<Spec>& specs, std::uint64_t first_ticket, std::size_t want) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    rec.want = want;
    rec.all_in = kj::mv(paf.fulfiller);
    auto req = session.submitRequest();
    auto list = req.initCalls(static_cast<unsigned>(specs.size()));
    for (unsigned i = 0; i < specs.size(); ++i) fill(specs[i], first_ticket + i, list[i]);
    req.send().wait(ws);
    if (rec.calls < want) timer.timeoutAfter(30 * kj::SECONDS, kj::mv(paf.promise)).wait(ws);
  };

  const Msg first("user", "first");
  const std::uint64_t kLimit = 64 * 1024;
  std::vector<Spec> batch{
      /* 1 */ {CallKind::CREATE, "w", "", {}, "", "EchoAgent", "W"},
      /* 2 */ {CallKind::REPLY, "w", "dup-id", first, "", "", "", kLimit},
      /* 3 */ {CallKind::REPLY, "w", "dup-id", Msg("user", "second"), "", "", "", kLimit},
      /* 4 */ {CallKind::METHOD, "w", "", {}, "count"},
      /* 5 */ {CallKind::MEMORY, "w"},
      /* 6 */ {CallKind::OBSERVE, "w", "", Msg("user", "heard")},
      /* 7 */ {CallKind::METHOD_ASYNC, "w", "async-1", {}, "ping", "", "", kLimit},
      /* 8 */ {CallKind::METHOD, "nope", "", {}, "ping"},
      /* 9 */ {CallKind::REPLY, "nope", "to-nope", Msg("user", "x"), "", "", "", kLimit},
      /* 10 */ {CallKind::OBSERVE, "nope", "", Msg("user", "x")},
      /* 11 */ {CallKind::MEMORY, "nope"},
      /* 12 */ {CallKind::REPLY, "w", "", Msg("user", "no call id"), "", "", "", kLimit},
      /* 13 */ {CallKind::CREATE, "w", "", {}, "", "EchoAgent", "again"},
      /* 14 */ {CallKind::CREATE, "", "", {}, "", "NoSuchAgent", ""},
      /* 15 */ {CallKind::CREATE, "blob", "", {}, "", "BlobAgent", ""},
      /* 16 */
      {CallKind::REPLY, "blob", "big", Msg("user", Value{{"make_bytes", 100000}}), "", "", "", kLimit},
      /* 17 */
      {CallKind::REPLY, "blob", "big-whole", Msg("user", Value{{"make_bytes", 100000}}), "", "", "", 0},
      /* 18 */ {CallKind::METHOD, "w", "", {}, "no_such_method"},
  };
  submit(batch, 1, batch.size());

  // Every ticket, exactly once, and nothing else.
  REQUIRE(rec.calls == batch.size());
  REQUIRE(rec.by_ticket.size() == batch.size());
  for (std::uint64_t t = 1; t <= batch.size(); ++t) {
    INFO("ticket " << t);
    REQUIRE(rec.by_ticket.count(t) == 1);
    CHECK(rec.by_ticket[t].size() == 1);
  }
  CHECK(rec.batches >= 1);
  CHECK(rec.batches <= batch.size());
  auto got = [&](std::uint64_t t) -> const Done& { return rec.by_ticket.at(t).front(); };

  // 1: created under the id asked for.
  CHECK(got(1).what == "created");
  CHECK(got(1).created == "w");
  // 2: the first reply ran; 3: its duplicate call id was refused (and it did not run: 4).
  REQUIRE(got(2).what == "msg");
  CHECK(got(2).msg->content == "first");
  CHECK(got(2).msg->name == "W");
  REQUIRE(got(3).what == "error");
  CHECK(got(3).error->code() == ErrorCode::duplicate_call_id);
  CHECK_THAT(got(3).error->message(), Contains("dup-id"));
  CHECK(got(3).error->agent_id() == "w");
  REQUIRE(got(4).what == "value");
  CHECK(got(4).value == 1);
  // 5: memory in the agent's order (after the one reply that ran).
  REQUIRE(got(5).what == "memory");
  REQUIRE(got(5).memory.size() == 2);
  CHECK(got(5).memory[0].content == "first");
  CHECK(got(5).memory[1].content == "first");
  // 6: observe queued.
  CHECK(got(6).what == "done");
  // 7: methodAsync's value is a message.
  REQUIRE(got(7).what == "msg");
  CHECK(got(7).msg->content == "pong");
  // 8-11: an unknown agent, whatever the kind.
  REQUIRE(got(8).what == "value_error");
  CHECK(got(8).error->code() == ErrorCode::unknown_agent);
  CHECK(got(8).error->agent_id() == "nope");
  REQUIRE(got(9).what == "outcome_error");
  CHECK(got(9).error->code() == ErrorCode::unknown_agent);
  CHECK(got(9).error->agent_id() == "nope");
  REQUIRE(got(10).what == "error");
  CHECK(got(10).error->code() == ErrorCode::unknown_agent);
  REQUIRE(got(11).what == "error");
  CHECK(got(11).error->code() == ErrorCode::unknown_agent);
  // 12: a reply needs a call id.
  REQUIRE(got(12).what == "error");
  CHECK(got(12).error->code() == ErrorCode::bad_request);
  // 13: the id is taken; 14: no such class.
  REQUIRE(got(13).what == "error");
  CHECK(got(13).error->code() == ErrorCode::duplicate_agent);
  REQUIRE(got(14).what == "error");
  CHECK(got(14).error->code() == ErrorCode::unknown_class);
  CHECK_THAT(got(14).error->message(), Contains("NoSuchAgent"));
  // 15-17: a big result is announced above the inline limit, sent whole with limit 0.
  CHECK(got(15).what == "created");
  CHECK(got(15).created == "blob");
  REQUIRE(got(16).what == "too_large");
  CHECK(got(16).too_large >= 100000);
  REQUIRE(got(17).what == "msg");
  CHECK(is_blob(got(17).msg->content, 100000));
  // 18: an unknown method is an error value, not a fault.
  REQUIRE(got(18).what == "value_error");
  CHECK(got(18).error->code() == ErrorCode::unknown_method);

  // Session.read gives the whole too-large result, and the first of the duplicated call.
  {
    auto read = session.readRequest();
    read.setCallId("big");
    auto r = read.send().wait(ws);
    REQUIRE(r.getOutcome().isMsg());
    CHECK(is_blob(agentd::detail::read_msg(r.getOutcome().getMsg()).content, 100000));
  }
  {
    auto read = session.readRequest();
    read.setCallId("dup-id");
    auto r = read.send().wait(ws);
    REQUIRE(r.getOutcome().isMsg());
    CHECK(agentd::detail::read_msg(r.getOutcome().getMsg()).content == "first");
  }

  // A second batch on the same session: tickets are the client's; the observe has run, and the
  // refused call id stays taken.
  std::vector<Spec> second{
      /* 101 */ {CallKind::MEMORY, "w"},
      /* 102 */ {CallKind::REPLY, "w", "dup-id", Msg("user", "third"), "", "", "", kLimit},
      /* 103 */ {CallKind::METHOD, "w", "", {}, "count"},
  };
  const std::size_t before = rec.calls;
  submit(second, 101, before + second.size());
  REQUIRE(rec.calls == before + second.size());
  REQUIRE(rec.by_ticket.count(101) == 1);
  REQUIRE(got(101).what == "memory");
  REQUIRE(got(101).memory.size() == 3);
  CHECK(got(101).memory[2].content == "heard");
  REQUIRE(got(102).what == "error");
  CHECK(got(102).error->code() == ErrorCode::duplicate_call_id);
  REQUIRE(got(103).what == "value");
  CHECK(got(103).value == 1);
}

TEST_CASE("a reply sent with report = false gets no CallDone, and its result is in the pool",
          "[batch][wire]") {
  using agentd::wire::CallKind;
  auto s = ServerProcess::start(standard_args());
  Received rec;
  WireSession w(*s, rec);
  auto& ws = w.io.waitScope;
  auto& session = w.session;
  auto paf = kj::newPromiseAndFulfiller<void>();
  rec.want = 2;  // the create and the reported consumer
  rec.all_in = kj::mv(paf.fulfiller);
  auto req = session.submitRequest();
  auto list = req.initCalls(4);
  list[0].setTicket(1);
  list[0].setKind(CallKind::CREATE);
  list[0].setAgentId("t");
  list[0].setClassName("TrailAgent");
  list[0].initArgs().initObject(0);
  // Ticket 2: a link whose placeholder the client dropped (report = false).
  list[1].setTicket(2);
  list[1].setKind(CallKind::REPLY);
  list[1].setAgentId("t");
  list[1].setCallId("silent");
  list[1].setReport(false);
  agentd::detail::write_msg(Msg("user", "a"), list[1].initInput().initMsg());
  // Ticket 3: a reported reply that consumes it.
  list[2].setTicket(3);
  list[2].setKind(CallKind::REPLY);
  list[2].setAgentId("t");
  list[2].setCallId("loud");
  list[2].setInlineLimit(1024);
  auto ref = list[2].initInput().initPlaceholder();
  ref.setCallId("silent");
  ref.setServerId(agentd::detail::to_kj(s->connect().server_id()));
  // Ticket 4: the same duplicate id, unreported: refused silently too.
  list[3].setTicket(4);
  list[3].setKind(CallKind::REPLY);
  list[3].setAgentId("t");
  list[3].setCallId("silent");
  list[3].setReport(false);
  req.send().wait(ws);
  w.io.provider->getTimer().timeoutAfter(30 * kj::SECONDS, kj::mv(paf.promise)).wait(ws);
  // Give a stray CallDone for tickets 2 or 4 time to arrive.
  w.io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).wait(ws);

  CHECK(rec.by_ticket.count(2) == 0);
  CHECK(rec.by_ticket.count(4) == 0);
  REQUIRE(rec.by_ticket.count(3) == 1);
  REQUIRE(rec.by_ticket[3].front().what == "msg");
  CHECK(rec.by_ticket[3].front().msg->content == "a>t>t");
  auto read = session.readRequest();
  read.setCallId("silent");
  auto r = read.send().wait(ws);
  REQUIRE(r.getOutcome().isMsg());
  CHECK(agentd::detail::read_msg(r.getOutcome().getMsg()).content == "a>t");
}

TEST_CASE("calls queued behind a create whose constructor throws fail with its error", "[batch][wire]") {
  using agentd::wire::CallKind;
  auto s = ServerProcess::start(standard_args());
  Received rec;
  WireSession w(*s, rec);
  auto& ws = w.io.waitScope;
  auto& session = w.session;

  // A create whose constructor fails: the calls queued behind it in the same batch fail with its
  // error instead of running or hanging.
  constexpr std::uint64_t kReplies = 200;
  auto paf = kj::newPromiseAndFulfiller<void>();
  rec.want = kReplies + 2;
  rec.all_in = kj::mv(paf.fulfiller);
  auto req = session.submitRequest();
  auto list = req.initCalls(kReplies + 2);
  list[0].setTicket(1);
  list[0].setKind(CallKind::CREATE);
  list[0].setAgentId("f");
  list[0].setClassName("FlakyAgent");
  list[0].initArgs().initObject(1)[0].setKey("fail_construct");
  for (std::uint64_t i = 0; i < kReplies; ++i) {
    auto spec = list[static_cast<unsigned>(i + 1)];
    spec.setTicket(i + 2);
    spec.setKind(CallKind::REPLY);
    spec.setAgentId("f");
    spec.setCallId(agentd::detail::to_kj("r" + std::to_string(i)));
    spec.setInlineLimit(1024);
    agentd::detail::write_msg(Msg("user", "x"), spec.initInput().initMsg());
  }
  list[kReplies + 1].setTicket(kReplies + 2);
  list[kReplies + 1].setKind(CallKind::METHOD);
  list[kReplies + 1].setAgentId("f");
  list[kReplies + 1].setMethod("count");
  req.send().wait(ws);
  w.io.provider->getTimer().timeoutAfter(30 * kj::SECONDS, kj::mv(paf.promise)).wait(ws);

  REQUIRE(rec.by_ticket.size() == kReplies + 2);
  REQUIRE(rec.by_ticket[1].front().what == "error");
  CHECK(rec.by_ticket[1].front().error->code() == ErrorCode::bad_args);
  int failed_like_create = 0;
  for (std::uint64_t t = 2; t < kReplies + 2; ++t) {
    const Done& d = rec.by_ticket[t].front();
    if (d.what == "outcome_error" && d.error->code() == ErrorCode::bad_args && d.error->agent_id() == "f")
      ++failed_like_create;
  }
  CHECK(failed_like_create == static_cast<int>(kReplies));
  REQUIRE(rec.by_ticket[kReplies + 2].front().what == "value_error");
  CHECK(rec.by_ticket[kReplies + 2].front().error->code() == ErrorCode::bad_args);
  // Most of 202 completions travel together, not one message each.
  CHECK(rec.batches < kReplies);
}
