// The client's connection core (libagentd/src/session) in-process: a LoopState connected to a
// real Server over kj::newTwoWayPipe, both on this thread's loop, set up the way
// client/client_core.cpp does it over TCP. The test plays the client's user threads: it queues
// calls with send_spec (call_batch.h), runs the loop, and reads what reached the tickets
// (CallDone dispatch, call_done.h) and what failed them (loop_state.h).
//
// The session capability is wrapped so the test sees every Session.submit and Session.read the
// client makes: batching is about how many messages leave, not only about the answers.
#include "call_batch.h"

#include "call_done.h"
#include "loop_state.h"
#include "result_slot.h"
#include "server.h"
#include "value_codec.h"
#include "gate.h"

#include <agentd/agent.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

using namespace agentd;
using namespace agentd::detail;
using Catch::Matchers::Contains;

namespace {

agentd::test::Gate g_gate;  // GateAgent / GatedAgent replies wait on it

// Answers with its input's text and remembers both (so memory shows the order calls ran in).
class EchoAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    memory().add(x);
    Msg out(name(), x.text());
    memory().add(out);
    return out;
  }
};

class GatedAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    g_gate.wait();
    memory().add(x);  // the order calls ran in
    return Msg(name(), x.text());
  }
};

// What went through the session: the number of calls in each submit, and the reads.
struct SessionLog {
  std::vector<unsigned> submits;
  std::vector<std::string> reads;
  unsigned lone_asked = 0;     // submits that asked for answerLone
  unsigned answered_lone = 0;  // CallDones that came in a submit's answer
  // false: the session plays a server that predates answerLone (it never sees the flag, so
  // every CallDone goes through the sink).
  bool server_answers_lone = true;
};

// Forwards to the server's session, logging each request.
class LoggingSession final : public wire::Session::Server {
 public:
  LoggingSession(wire::Session::Client inner, SessionLog& log) : inner_(kj::mv(inner)), log_(log) {}

  kj::Promise<void> submit(SubmitContext context) override {
    auto calls = context.getParams().getCalls();
    log_.submits.push_back(calls.size());
    auto req = inner_.submitRequest();
    req.setCalls(calls);
    req.setDropped(context.getParams().getDropped());
    if (context.getParams().getAnswerLone()) {
      ++log_.lone_asked;
      req.setAnswerLone(log_.server_answers_lone);
    }
    return req.send().then([this, context](capnp::Response<wire::Session::SubmitResults> r) mutable {
      context.getResults().setRefused(r.getRefused());
      context.getResults().setDone(r.getDone());
      log_.answered_lone += r.getDone().size();
    });
  }

  kj::Promise<void> read(ReadContext context) override {
    log_.reads.push_back(to_std(context.getParams().getCallId()));
    auto req = inner_.readRequest();
    req.setCallId(context.getParams().getCallId());
    return req.send().then([context](capnp::Response<wire::Session::ReadResults> r) mutable {
      context.getResults().setOutcome(r.getOutcome());
    });
  }

 private:
  wire::Session::Client inner_;
  SessionLog& log_;  // outlives this
};

// What became of tickets with callbacks (create, observe, memory): how often each ran.
struct Answers {
  std::map<std::string, int> done;
  std::map<std::string, int> failed;
  std::map<std::string, std::string> created;                    // create: the new agent's id
  std::map<std::string, std::size_t> memory;                     // memory: how many messages
  std::map<std::string, std::vector<std::string>> memory_texts;  // memory: their texts
  std::map<std::string, Error> errors;                           // CallDone errors and failures
};

Ticket counted(Answers& a, const std::string& key) {
  Ticket t;
  t.on_done = [&a, key](wire::CallDone::Reader d) {
    ++a.done[key];
    if (d.isCreated()) a.created[key] = to_std(d.getCreated());
    if (d.isMemory()) {
      a.memory[key] = d.getMemory().size();
      for (auto m : d.getMemory()) a.memory_texts[key].push_back(read_msg(m).text());
    }
    if (d.isError()) a.errors.insert_or_assign(key, read_error(d.getError()));
  };
  t.on_fail = [&a, key](const Error& e) {
    ++a.failed[key];
    a.errors.insert_or_assign(key, e);
  };
  return t;
}

// A server and a client connection core talking to it over a pipe, on this thread's loop.
ServerOptions batch_test_options() {
  ServerOptions o;
  o.server_id = "batch-test";
  return o;
}

struct Connected {
  explicit Connected(ServerOptions options = batch_test_options())
      : server(std::move(options), io,
               {agent_class<EchoAgent>("EchoAgent"), agent_class<GatedAgent>("GatedAgent")}) {
    g_gate.set(true);
    loop = std::make_unique<LoopState>(io);
    loop->stream = kj::mv(pipe.ends[1]);
    loop->rpc = kj::heap<detail::RpcConnection>(*loop->stream);
    loop->server = loop->rpc->bootstrap().castAs<wire::AgentServer>();
    loop->where = "the test pipe";
    open_session(*loop);
    loop->session = kj::heap<LoggingSession>(kj::mv(loop->session), log);
  }
  kj::AsyncIoContext io = kj::setupAsyncIo();
  detail::Server server;
  kj::TwoWayPipe pipe = kj::newTwoWayPipe();
  // The server's end of the connection (the test drops it to cut the connection).
  kj::Own<kj::AsyncIoStream> server_end = kj::mv(pipe.ends[0]);
  kj::Own<capnp::TwoPartyClient> server_rpc =
      kj::heap<capnp::TwoPartyClient>(*server_end, server.bootstrap(), capnp::rpc::twoparty::Side::SERVER);
  SessionLog log;
  Answers answers;
  std::unique_ptr<LoopState> loop;
  std::string last_call_id;

  ~Connected() {
    g_gate.set(true);  // no worker may stay blocked in a GatedAgent
    loop.reset();      // the client's state goes first, as when a Client closes
  }

  // Runs the loop until pred holds or timeout passes; returns pred().
  bool pump_until(const std::function<bool()>& pred,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred() && std::chrono::steady_clock::now() < deadline)
      io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(io.waitScope);
    return pred();
  }

  // A round trip to the server: whatever it sent before answering has arrived.
  void ping() { loop->server.pingRequest().send().wait(io.waitScope); }

  void lose_connection() {
    server_rpc = nullptr;
    server_end = nullptr;
  }

  // Queues the creation of agent id of class cls (answered into answers under "create id").
  void create(const std::string& cls, const std::string& id) {
    auto spec = spec_for(wire::CallKind::CREATE, id);
    spec.class_name = cls;
    send_spec(*loop, std::move(spec), counted(answers, "create " + id));
  }

  // Queues a reply of agent to text whose result lands in the returned slot; its call id is
  // then last_call_id.
  std::shared_ptr<ResultSlot> reply(const std::string& agent, const std::string& text,
                                    std::uint64_t inline_limit = kInlineLimit) {
    auto spec = spec_for(wire::CallKind::REPLY, agent);
    spec.call_id = last_call_id = new_id();
    spec.msg = Msg("user", text, "user");
    spec.inline_limit = inline_limit;
    auto slot = std::make_shared<ResultSlot>();
    Ticket t;
    t.slot = slot;
    t.call_id = spec.call_id;
    send_spec(*loop, std::move(spec), std::move(t));
    return slot;
  }

  void observe(const std::string& agent, const std::string& text, const std::string& key) {
    auto spec = spec_for(wire::CallKind::OBSERVE, agent);
    spec.msg = Msg("user", text, "user");
    send_spec(*loop, std::move(spec), counted(answers, key));
  }

  void memory(const std::string& agent, const std::string& key) {
    send_spec(*loop, spec_for(wire::CallKind::MEMORY, agent), counted(answers, key));
  }
};

bool settled(ResultSlot& s) {
  std::lock_guard lock(s.mu);
  return s.value.has_value() || s.error.has_value();
}
std::optional<Msg> value_of(ResultSlot& s) {
  std::lock_guard lock(s.mu);
  return s.value;
}
std::optional<Error> error_of(ResultSlot& s) {
  std::lock_guard lock(s.mu);
  return s.error;
}
bool all_settled(const std::vector<std::shared_ptr<ResultSlot>>& slots) {
  for (const auto& s : slots)
    if (!settled(*s)) return false;
  return true;
}

}  // namespace

TEST_CASE("calls issued in one loop turn leave as one Session.submit and each is answered once",
          "[call_batch]") {
  Connected c;
  constexpr int kReplies = 20;
  constexpr int kObserves = 5;
  c.create("EchoAgent", "e1");
  std::vector<std::shared_ptr<ResultSlot>> slots;
  for (int i = 0; i < kReplies; ++i) slots.push_back(c.reply("e1", "hi " + std::to_string(i)));
  for (int i = 0; i < kObserves; ++i) c.observe("e1", "seen", "observe " + std::to_string(i));
  c.memory("e1", "memory");
  // Nothing has left yet: the calls wait for the end of this loop turn.
  CHECK(c.log.submits.empty());
  CHECK(c.loop->batch.size() == 1 + kReplies + kObserves + 1);
  CHECK(c.loop->tickets.size() == 1 + kReplies + kObserves + 1);

  REQUIRE(c.pump_until([&] { return c.loop->tickets.empty() && all_settled(slots); }));
  CHECK(c.log.submits == std::vector<unsigned>{1 + kReplies + kObserves + 1});
  for (int i = 0; i < kReplies; ++i) {
    INFO("reply " << i);
    auto v = value_of(*slots[i]);
    REQUIRE(v);
    CHECK(v->text() == "hi " + std::to_string(i));
    CHECK(v->name == "e1");
  }
  CHECK(c.answers.created["create e1"] == "e1");
  // The calls ran in the order they were issued: memory saw every reply and observation.
  CHECK(c.answers.memory["memory"] == 2 * kReplies + kObserves);
  CHECK(c.answers.errors.empty());
  CHECK(c.answers.failed.empty());

  // Whatever the server sent has arrived: still one answer per ticket.
  c.ping();
  CHECK(c.answers.done.size() == 1 + kObserves + 1);
  for (const auto& [key, n] : c.answers.done) {
    INFO(key);
    CHECK(n == 1);
  }

  // Calls of a later turn are the next submit.
  auto later = c.reply("e1", "again");
  c.observe("e1", "seen", "observe later");
  REQUIRE(c.pump_until([&] { return settled(*later) && c.loop->tickets.empty(); }));
  CHECK(c.log.submits == std::vector<unsigned>{1 + kReplies + kObserves + 1, 2});
  CHECK(value_of(*later)->text() == "again");
  CHECK(c.answers.done["observe later"] == 1);
}

TEST_CASE(
    "a turn's calls are cut into several submits before one would pass kBatchBytes or "
    "4096 calls",
    "[call_batch]") {
  Connected c;
  c.create("EchoAgent", "e1");
  REQUIRE(c.pump_until([&] { return c.loop->tickets.empty(); }));
  c.log.submits.clear();

  SECTION("bytes: a call that would take the batch past kBatchBytes starts the next one") {
    const std::string third(kBatchBytes * 3 / 8, 'x');  // 3 MiB: two fit in a batch, three do not
    for (int i = 0; i < 3; ++i) c.observe("e1", third, "big " + std::to_string(i));
    c.observe("e1", "small", "small");
    REQUIRE(c.pump_until([&] { return c.loop->tickets.empty(); }));
    CHECK(c.log.submits == std::vector<unsigned>{2, 2});
    CHECK(c.answers.done.size() == 5);  // the create and the four observes
    CHECK(c.answers.errors.empty());
  }
  SECTION("count: 4096 calls make a full batch") {
    for (int i = 0; i < 4100; ++i) c.observe("e1", "m", "observe " + std::to_string(i));
    REQUIRE(c.pump_until([&] { return c.loop->tickets.empty(); }));
    CHECK(c.log.submits == std::vector<unsigned>{4096, 4});
    CHECK(c.answers.done.size() == 4101);
    CHECK(c.answers.errors.empty());
  }
}

TEST_CASE("a call too big for any message fails alone with too_large, and the calls around it go",
          "[call_batch]") {
  Connected c;
  c.create("EchoAgent", "e1");
  auto before = c.reply("e1", "before");
  auto big = c.reply("e1", std::string(kMaxMessageBytes + 1024, 'b'));
  auto after = c.reply("e1", "after");
  REQUIRE(c.pump_until([&] { return all_settled({before, big, after}) && c.loop->tickets.empty(); }));
  auto e = error_of(*big);
  REQUIRE(e);
  CHECK(e->code() == ErrorCode::too_large);
  CHECK_FALSE(e->retryable());
  CHECK_THAT(e->message(), Contains("ClientOptions::max_message_bytes"));
  CHECK_THAT(e->message(), Contains("it was not sent"));
  CHECK(value_of(*before)->text() == "before");
  CHECK(value_of(*after)->text() == "after");
  // The big call never left: the calls around it went together.
  CHECK(c.log.submits == std::vector<unsigned>{3});
}

TEST_CASE("a result over the inline limit is read in full once it is wanted", "[call_batch]") {
  Connected c;
  c.create("EchoAgent", "e1");
  const std::string text(1000, 'r');

  SECTION("wanted before the answer came: read at once") {
    auto slot = c.reply("e1", text, /*inline_limit=*/100);
    slot->wanted = true;  // get() was called
    REQUIRE(c.pump_until([&] { return settled(*slot); }));
    CHECK(slot->too_large);
    auto v = value_of(*slot);
    REQUIRE(v);
    CHECK(v->text() == text);
    CHECK(c.log.reads.size() == 1);
  }
  SECTION("wanted later: nothing is read until then") {
    auto slot = c.reply("e1", text, /*inline_limit=*/100);
    REQUIRE(c.pump_until([&] { return c.loop->tickets.empty(); }));
    c.ping();
    CHECK(slot->too_large);
    CHECK_FALSE(settled(*slot));
    CHECK(c.log.reads.empty());
    // What Placeholder::get() does on the loop thread.
    slot->wanted = true;
    slot->full_requested = true;
    request_result(*c.loop, c.last_call_id, slot);
    REQUIRE(c.pump_until([&] { return settled(*slot); }));
    auto v = value_of(*slot);
    REQUIRE(v);
    CHECK(v->text() == text);
    CHECK(c.log.reads == std::vector<std::string>{c.last_call_id});
  }
}

TEST_CASE(
    "a placeholder dropped before its call left is sent unreported, and its result still "
    "lands in the server's pool",
    "[call_batch]") {
  Connected c;
  c.create("EchoAgent", "e1");
  REQUIRE(c.pump_until([&] { return c.loop->tickets.empty(); }));
  c.log.submits.clear();
  std::string call_id;
  {
    auto spec = spec_for(wire::CallKind::REPLY, "e1");
    spec.call_id = call_id = new_id();
    spec.msg = Msg("user", "kept", "user");
    spec.inline_limit = kInlineLimit;
    Ticket t;
    t.slot = std::make_shared<ResultSlot>();  // the ticket holds the only reference
    t.call_id = spec.call_id;
    send_spec(*c.loop, std::move(spec), std::move(t));
  }
  REQUIRE(c.pump_until([&] { return c.log.submits.size() == 1; }));
  CHECK(c.log.submits == std::vector<unsigned>{1});
  // Forgotten at once: nothing waits for a CallDone that will not come.
  CHECK(c.loop->tickets.empty());

  auto req = c.loop->session.readRequest();
  req.setCallId(to_kj(call_id));
  auto r = req.send().wait(c.io.waitScope);
  REQUIRE(r.getOutcome().isMsg());
  CHECK(read_msg(r.getOutcome().getMsg()).text() == "kept");
}

TEST_CASE("a lost connection fails every waiting ticket with a retryable disconnected error",
          "[call_batch]") {
  Connected c;
  c.create("GatedAgent", "g");
  REQUIRE(c.pump_until([&] { return c.loop->tickets.empty(); }));
  g_gate.set(false);
  std::vector<std::shared_ptr<ResultSlot>> slots;
  for (int i = 0; i < 3; ++i) slots.push_back(c.reply("g", "r" + std::to_string(i)));
  c.memory("g", "memory");  // waits behind the replies
  // The first reply runs (and blocks); the rest wait in the agent's mailbox.
  REQUIRE(c.pump_until([&] { return c.server.metrics().calls_running == 1; }));
  REQUIRE(c.loop->tickets.size() == 4);

  c.lose_connection();
  REQUIRE(c.pump_until([&] { return c.loop->tickets.empty() && all_settled(slots); }));
  auto check_disconnected = [](const Error& e) {
    CHECK(e.code() == ErrorCode::disconnected);
    CHECK(e.retryable());
    CHECK_THAT(e.message(), Contains("the test pipe"));
  };
  for (auto& s : slots) {
    auto e = error_of(*s);
    REQUIRE(e);
    check_disconnected(*e);
  }
  CHECK(c.answers.failed["memory"] == 1);
  CHECK(c.answers.done.count("memory") == 0);
  REQUIRE(c.answers.errors.count("memory") == 1);
  check_disconnected(c.answers.errors.at("memory"));

  // A call issued afterwards fails the same way instead of waiting forever.
  auto late = c.reply("g", "late");
  c.memory("g", "late memory");
  REQUIRE(c.pump_until([&] { return settled(*late) && c.loop->tickets.empty(); }));
  auto e = error_of(*late);
  REQUIRE(e);
  CHECK(e->code() == ErrorCode::disconnected);
  CHECK(e->retryable());
  CHECK(c.answers.failed["late memory"] == 1);
}

TEST_CASE(
    "calls refused as overloaded go again with their tickets until taken, and run in the "
    "order they were issued",
    "[call_batch][limits]") {
  ServerOptions o = batch_test_options();
  o.max_queued_calls_per_agent = 2;
  Connected c(o);
  c.loop->limits.retry_initial = std::chrono::milliseconds(2);
  c.loop->limits.retry_max = std::chrono::milliseconds(8);
  g_gate.set(false);
  c.create("GatedAgent", "g");
  // Created first: its ticket is not one of the six counted below (a busy machine may run the
  // constructor after the third submit).
  REQUIRE(c.pump_until([&] { return c.loop->tickets.empty(); }));
  std::vector<std::shared_ptr<ResultSlot>> slots;
  for (int i = 0; i < 6; ++i) slots.push_back(c.reply("g", std::to_string(i)));
  // The agent holds two calls; the other four are refused and sent again, more than once.
  REQUIRE(c.pump_until([&] { return c.log.submits.size() >= 3; }));
  for (auto& s : slots) CHECK_FALSE(settled(*s));
  CHECK(c.loop->tickets.size() == 6);
  g_gate.set(true);
  REQUIRE(c.pump_until([&] { return all_settled(slots); }));
  for (int i = 0; i < 6; ++i) {
    REQUIRE(value_of(*slots[i]));
    CHECK(value_of(*slots[i])->text() == std::to_string(i));
  }
  c.memory("g", "memory");
  REQUIRE(c.pump_until([&] { return c.answers.done.count("memory") > 0; }));
  CHECK(c.answers.memory_texts["memory"] == std::vector<std::string>{"0", "1", "2", "3", "4", "5"});
  // Nothing of the refusals is left: the session forgets a refused call once it is queued.
  CHECK(c.loop->retries.empty());
  CHECK(c.loop->tickets.empty());
}

TEST_CASE(
    "a refused call is given up at its deadline with the server's error, and the agent's "
    "later calls are not held up by it",
    "[call_batch][limits]") {
  ServerOptions o = batch_test_options();
  o.max_queued_calls_per_agent = 1;
  Connected c(o);
  c.loop->limits.retry_initial = std::chrono::milliseconds(2);
  c.loop->limits.retry_max = std::chrono::milliseconds(4);
  c.loop->limits.timeout = std::chrono::milliseconds(100);
  g_gate.set(false);
  c.create("GatedAgent", "g");
  auto first = c.reply("g", "first");
  auto second = c.reply("g", "second");
  REQUIRE(c.pump_until([&] { return settled(*second); }));
  auto e = error_of(*second);
  REQUIRE(e);
  CHECK(e->code() == ErrorCode::overloaded);
  CHECK(e->retryable());
  CHECK_THAT(e->message(), Contains("--max-queued-calls-per-agent 1"));
  g_gate.set(true);
  REQUIRE(c.pump_until([&] { return settled(*first); }));
  // The session was told to forget the given-up call: the next call is taken.
  auto third = c.reply("g", "third");
  REQUIRE(c.pump_until([&] { return settled(*third); }));
  REQUIRE(value_of(*third));
  CHECK(value_of(*third)->text() == "third");
}

TEST_CASE("at most kMaxSubmitsInFlight submits are unanswered, and later batches wait in order",
          "[call_batch][limits]") {
  Connected c;
  c.create("EchoAgent", "e1");
  std::vector<std::shared_ptr<ResultSlot>> slots;
  constexpr int kCalls = 4096 * 6;
  for (int i = 0; i < kCalls; ++i) slots.push_back(c.reply("e1", std::to_string(i)));
  // Full batches left at once, up to the bound; the rest are held.
  CHECK(c.loop->submits_in_flight == kMaxSubmitsInFlight);
  CHECK_FALSE(c.loop->held.empty());
  REQUIRE(c.pump_until([&] { return all_settled(slots); }, std::chrono::seconds(60)));
  CHECK(c.loop->submits_in_flight == 0);
  CHECK(c.loop->held.empty());
  for (int i = 0; i < kCalls; i += 997) CHECK(value_of(*slots[i])->text() == std::to_string(i));
  CHECK(value_of(*slots[kCalls - 1])->text() == std::to_string(kCalls - 1));
}

TEST_CASE("a lone call is answered in its submit's answer, and waiting ones do not hold back the next",
          "[call_batch][lone]") {
  Connected c;
  constexpr int kAgents = 3 * kMaxSubmitsInFlight;
  for (int i = 0; i < kAgents; ++i) c.create("GatedAgent", "g" + std::to_string(i));
  c.create("EchoAgent", "e1");
  REQUIRE(c.pump_until([&] { return c.loop->tickets.empty(); }));
  c.log = SessionLog{};

  SECTION("a call alone in its turn: one RPC, answered in the submit's answer") {
    auto slot = c.reply("e1", "alone");
    REQUIRE(c.pump_until([&] { return settled(*slot); }));
    CHECK(value_of(*slot)->text() == "alone");
    CHECK(c.log.submits == std::vector<unsigned>{1});
    CHECK(c.log.lone_asked == 1);
    CHECK(c.log.answered_lone == 1);
    // Calls of one turn travel together and come back through the sink.
    auto a = c.reply("e1", "a");
    auto b = c.reply("e1", "b");
    REQUIRE(c.pump_until([&] { return all_settled({a, b}); }));
    CHECK(value_of(*b)->text() == "b");
    CHECK(c.log.lone_asked == 1);
    CHECK(c.log.answered_lone == 1);
  }
  SECTION("calls to blocked agents, one per turn: every one reaches the server at once") {
    // Each waits in its submit's answer until its agent finishes; counted against
    // kMaxSubmitsInFlight they would hold every call after the fourth at the client.
    g_gate.set(false);
    std::vector<std::shared_ptr<ResultSlot>> slots;
    for (int i = 0; i < kAgents; ++i) {
      slots.push_back(c.reply("g" + std::to_string(i), "t" + std::to_string(i)));
      c.ping();  // the next call goes in a turn of its own
    }
    CHECK(c.log.submits.size() == kAgents);
    CHECK(c.log.lone_asked == kAgents);
    CHECK(c.loop->submits_in_flight == 0);
    CHECK(c.loop->held.empty());
    // Meanwhile a call to an agent that is free is answered at once.
    auto free = c.reply("e1", "free");
    REQUIRE(c.pump_until([&] { return settled(*free); }));
    CHECK_FALSE(settled(*slots[0]));
    g_gate.set(true);
    REQUIRE(c.pump_until([&] { return all_settled(slots); }));
    for (int i = 0; i < kAgents; ++i) CHECK(value_of(*slots[i])->text() == "t" + std::to_string(i));
    CHECK(c.log.answered_lone == kAgents + 1);
  }
  SECTION("a server that predates answerLone answers through the sink, and calls still arrive") {
    c.log.server_answers_lone = false;
    std::vector<std::shared_ptr<ResultSlot>> slots;
    for (int i = 0; i < 3; ++i) {
      slots.push_back(c.reply("e1", "old " + std::to_string(i)));
      REQUIRE(c.pump_until([&] { return settled(*slots.back()); }));
    }
    CHECK(value_of(*slots[2])->text() == "old 2");
    CHECK(c.log.lone_asked == 3);
    CHECK(c.log.answered_lone == 0);
  }
}
