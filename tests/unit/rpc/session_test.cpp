// The server's batched call path (Session / CallSink, rpc_server.cpp) in-process: a real Server
// and a real Cap'n Proto connection over kj::newTwoWayPipe, with the test thread as the loop
// thread. The test decides when the loop runs, so it can make completions pile up and leave in
// one flush, which is how a bulk load behaves (hundreds of thousands per loop turn).
#include "server.h"
#include "value_codec.h"
#include "gate.h"

#include <agentd/agent.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace agentd;
using namespace agentd::detail;

namespace {

agentd::test::Gate g_gate;  // GateAgent / GatedAgent replies wait on it

class GateAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    g_gate.wait();
    return Msg(name(), x.content);
  }
};

// Answers with its input's content and remembers both.
class CopyAgent : public Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    memory().add(x);
    Msg out(name(), x.content);
    memory().add(out);
    return out;
  }
};

// What the client end heard: one entry per CallDone, and the size of each CallSink.done.
struct Heard {
  struct Done {
    bool is_msg = false;
    std::size_t text_bytes = 0;  // msg: the size of its text content
    std::size_t memory_msgs = 0;
    std::optional<ErrorCode> error;
    bool created = false;
  };
  std::map<std::uint64_t, Done> done;  // by ticket
  std::vector<std::size_t> message_bytes;
};

class RecordingSink final : public wire::CallSink::Server {
 public:
  explicit RecordingSink(Heard& heard) : heard_(heard) {}
  kj::Promise<void> done(DoneContext context) override {
    auto params = context.getParams();
    heard_.message_bytes.push_back(params.totalSize().wordCount * sizeof(capnp::word));
    for (auto d : params.getCalls()) {
      Heard::Done& out = heard_.done[d.getTicket()];
      switch (d.which()) {
        case wire::CallDone::OUTCOME:
          if (d.getOutcome().isMsg()) {
            out.is_msg = true;
            auto content = d.getOutcome().getMsg().getContent();
            if (content.isText()) out.text_bytes = content.getText().size();
          } else if (d.getOutcome().isError()) {
            out.error = from_wire(d.getOutcome().getError().getCode());
          }
          break;
        case wire::CallDone::ERROR:
          out.error = from_wire(d.getError().getCode());
          break;
        case wire::CallDone::MEMORY:
          out.memory_msgs = d.getMemory().size();
          break;
        case wire::CallDone::CREATED:
          out.created = true;
          break;
        default:
          break;
      }
    }
    return kj::READY_NOW;
  }

 private:
  Heard& heard_;
};

// A server and one client connection to it, both on this thread's loop.
ServerOptions inproc_options(std::size_t max_message_bytes = 0) {
  ServerOptions o;
  o.server_id = "inproc";
  if (max_message_bytes != 0) o.max_message_bytes = max_message_bytes;
  return o;
}

struct InProcess {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  Server server;
  capnp::TwoPartyServer rpc_server{server.bootstrap()};
  kj::TwoWayPipe pipe = kj::newTwoWayPipe();
  kj::Own<capnp::TwoPartyClient> client;
  Heard heard;
  wire::Session::Client session = nullptr;

  explicit InProcess(ServerOptions options = inproc_options())
      : server(std::move(options), io,
               {agent_class<GateAgent>("GateAgent"), agent_class<CopyAgent>("CopyAgent")}) {
    rpc_server.accept(kj::mv(pipe.ends[0]));
    client = kj::heap<capnp::TwoPartyClient>(*pipe.ends[1]);
    auto req = client->bootstrap().castAs<wire::AgentServer>().sessionRequest();
    req.setSink(kj::heap<RecordingSink>(heard));
    session = req.send().getSession();
  }
  ~InProcess() { g_gate.set(true); }  // no worker may stay blocked in a GateAgent

  // Runs the loop until pred holds (or a minute passes).
  bool pump_until(const std::function<bool()>& pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (!pred() && std::chrono::steady_clock::now() < deadline)
      io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(io.waitScope);
    return pred();
  }
  std::size_t answered(std::uint64_t from, std::uint64_t to) const {
    std::size_t n = 0;
    for (auto it = heard.done.lower_bound(from); it != heard.done.end() && it->first < to; ++it) ++n;
    return n;
  }
};

void set_create(wire::CallSpec::Builder c, std::uint64_t ticket, const std::string& cls,
                const std::string& id) {
  c.setTicket(ticket);
  c.setKind(wire::CallKind::CREATE);
  c.setClassName(to_kj(cls));
  c.setAgentId(to_kj(id));
}

void set_reply(wire::CallSpec::Builder c, std::uint64_t ticket, const std::string& agent,
               const std::string& call_id) {
  c.setTicket(ticket);
  c.setKind(wire::CallKind::REPLY);
  c.setAgentId(to_kj(agent));
  c.setCallId(to_kj(call_id));
  c.setInlineLimit(64 * 1024);
}

}  // namespace

TEST_CASE("completions that together exceed one message's limit all reach the client", "[session][bulk]") {
  // A gate call produces a 48 KiB text; kConsumers calls on other agents take it as their input
  // and answer with it. Their completions pile up while the loop does not run and leave in one
  // flush: about 140 MiB, more than one Cap'n Proto message may carry (64 MiB). Sent as one
  // CallSink.done, the RPC system refuses it and every one of these calls would be lost.
  constexpr std::uint64_t kConsumers = 3000;
  constexpr std::size_t kText = 48 * 1024;
  InProcess p;
  g_gate.set(false);
  {
    auto req = p.session.submitRequest();
    auto calls = req.initCalls(static_cast<unsigned>(2 * (kConsumers + 1)));
    unsigned n = 0;
    set_create(calls[n++], 1, "GateAgent", "gate");
    for (std::uint64_t i = 0; i < kConsumers; ++i)
      set_create(calls[n++], 2 + i, "CopyAgent", "c" + std::to_string(i));
    auto gate = calls[n++];
    set_reply(gate, 100000, "gate", "gate-call");
    write_msg(Msg("user", std::string(kText, 'g')), gate.initInput().initMsg());
    for (std::uint64_t i = 0; i < kConsumers; ++i) {
      auto c = calls[n++];
      set_reply(c, 200000 + i, "c" + std::to_string(i), "call-" + std::to_string(i));
      auto ref = c.initInput().initPlaceholder();
      ref.setServerId("inproc");
      ref.setCallId("gate-call");
    }
    req.send().wait(p.io.waitScope);
  }
  REQUIRE(p.pump_until([&] { return p.answered(1, 2 + kConsumers) == kConsumers + 1; }));

  // Open the gate without running the loop: every call finishes and its completion waits on the
  // loop's bridge until the loop runs again.
  g_gate.set(true);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (p.server.stats().calls_ok < kConsumers + 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(p.server.stats().calls_ok == kConsumers + 1);

  const std::size_t messages_before = p.heard.message_bytes.size();
  CHECK(p.pump_until([&] { return p.answered(200000, 200000 + kConsumers) == kConsumers; }));
  CHECK(p.answered(200000, 200000 + kConsumers) == kConsumers);
  for (std::uint64_t i = 0; i < kConsumers; ++i) {
    const auto& d = p.heard.done[200000 + i];
    INFO("consumer " << i);
    CHECK(d.is_msg);
    CHECK(d.text_bytes == kText);
  }
  // They came in several messages, each well inside the limit.
  CHECK(p.heard.message_bytes.size() - messages_before >= 2);
  for (auto bytes : p.heard.message_bytes) CHECK(bytes < kMaxMessageBytes);
}

TEST_CASE("an answer too big for one message fails alone with too_large, and the session lives",
          "[session][bulk]") {
  // A CopyAgent that heard 17 MiB remembers it twice (input and answer), and so do its other two
  // answers: its memory is about 100 MiB, which no single message can carry.
  InProcess p;
  const std::string big(17 << 20, 'm');
  for (std::uint64_t i = 0; i < 3; ++i) {
    auto req = p.session.submitRequest();
    auto calls = req.initCalls(i == 0 ? 2 : 1);
    unsigned n = 0;
    if (i == 0) set_create(calls[n++], 1, "CopyAgent", "big");
    set_reply(calls[n], 10 + i, "big", "big-" + std::to_string(i));
    write_msg(Msg("user", big), calls[n].initInput().initMsg());
    req.send().wait(p.io.waitScope);
  }
  REQUIRE(p.pump_until([&] { return p.answered(10, 13) == 3; }));
  for (std::uint64_t t = 10; t < 13; ++t) CHECK(p.heard.done[t].text_bytes == 0);  // tooLarge

  auto req = p.session.submitRequest();
  auto calls = req.initCalls(2);
  calls[0].setTicket(20);
  calls[0].setKind(wire::CallKind::MEMORY);
  calls[0].setAgentId("big");
  set_create(calls[1], 21, "CopyAgent", "after");
  req.send().wait(p.io.waitScope);
  REQUIRE(p.pump_until([&] { return p.answered(20, 22) == 2; }));
  REQUIRE(p.heard.done[20].error.has_value());
  CHECK(*p.heard.done[20].error == ErrorCode::too_large);
  CHECK(p.heard.done[21].created);  // the session and the server carry on
}

namespace {

// The one CallDone a submit's answer carries (answerLone), decoded as the sink would hear it.
std::optional<Heard::Done> answered_in_submit(capnp::Response<wire::Session::SubmitResults>& r,
                                              std::uint64_t ticket) {
  if (r.getDone().size() != 1 || r.getDone()[0].getTicket() != ticket) return std::nullopt;
  auto d = r.getDone()[0];
  Heard::Done out;
  if (d.isOutcome() && d.getOutcome().isMsg()) {
    out.is_msg = true;
    out.text_bytes = d.getOutcome().getMsg().getContent().getText().size();
  } else if (d.isOutcome() && d.getOutcome().isError()) {
    out.error = from_wire(d.getOutcome().getError().getCode());
  } else if (d.isError()) {
    out.error = from_wire(d.getError().getCode());
  } else if (d.isCreated()) {
    out.created = true;
  }
  return out;
}

kj::Promise<capnp::Response<wire::Session::SubmitResults>> lone_reply(InProcess& p, std::uint64_t ticket,
                                                                      const std::string& agent,
                                                                      const std::string& text) {
  auto req = p.session.submitRequest();
  req.setAnswerLone(true);
  auto call = req.initCalls(1)[0];
  set_reply(call, ticket, agent, "call-" + std::to_string(ticket));
  call.setInlineLimit(1 << 20);
  write_msg(Msg("user", text), call.initInput().initMsg());
  return req.send();
}

}  // namespace

TEST_CASE("a lone call sent with answerLone is answered in its submit's answer, not through the sink",
          "[session][lone]") {
  InProcess p;
  {
    auto req = p.session.submitRequest();
    auto calls = req.initCalls(2);
    set_create(calls[0], 1, "CopyAgent", "copy");
    set_create(calls[1], 2, "GateAgent", "gate");
    req.send().wait(p.io.waitScope);
  }
  REQUIRE(p.pump_until([&] { return p.answered(1, 3) == 2; }));

  SECTION("a short call: its CallDone rides in the answer") {
    auto r = lone_reply(p, 10, "copy", "hello").wait(p.io.waitScope);
    auto d = answered_in_submit(r, 10);
    REQUIRE(d);
    CHECK(d->is_msg);
    CHECK(d->text_bytes == 5);
    CHECK(r.getRefused().size() == 0);
  }
  SECTION("a call that waits: the submit stays unanswered until it finishes") {
    g_gate.set(false);
    auto answer = lone_reply(p, 11, "gate", "later");
    // Other calls on the session go on meanwhile, lone or not.
    auto other = lone_reply(p, 12, "copy", "now").wait(p.io.waitScope);
    CHECK(answered_in_submit(other, 12));
    CHECK_FALSE(answer.poll(p.io.waitScope));
    g_gate.set(true);
    auto r = answer.wait(p.io.waitScope);
    auto d = answered_in_submit(r, 11);
    REQUIRE(d);
    CHECK(d->text_bytes == 5);
  }
  SECTION("a call that fails: the error rides in the answer") {
    auto r = lone_reply(p, 13, "nobody", "x").wait(p.io.waitScope);
    auto d = answered_in_submit(r, 13);
    REQUIRE(d);
    REQUIRE(d->error);
    CHECK(*d->error == ErrorCode::unknown_agent);
  }
  SECTION("two calls in one submit: answered at once, both through the sink") {
    auto req = p.session.submitRequest();
    req.setAnswerLone(true);
    auto calls = req.initCalls(2);
    set_reply(calls[0], 14, "copy", "c14");
    write_msg(Msg("user", "a"), calls[0].initInput().initMsg());
    set_reply(calls[1], 15, "copy", "c15");
    write_msg(Msg("user", "b"), calls[1].initInput().initMsg());
    auto r = req.send().wait(p.io.waitScope);
    CHECK(r.getDone().size() == 0);
    REQUIRE(p.pump_until([&] { return p.answered(14, 16) == 2; }));
  }
  // Nothing of the lone calls came through the sink.
  p.client->bootstrap().castAs<wire::AgentServer>().pingRequest().send().wait(p.io.waitScope);
  CHECK(p.answered(10, 14) == 0);
}

TEST_CASE("a lone call whose answer is bigger than a sink batch is answered through the sink",
          "[session][lone]") {
  // At --max-message-bytes 1 MiB a CallSink message is cut at 128 KiB: a 300 KiB answer goes
  // through the sink, which cuts and checks sizes, and the submit answers with nothing.
  InProcess p(inproc_options(1 << 20));
  {
    auto req = p.session.submitRequest();
    set_create(req.initCalls(1)[0], 1, "CopyAgent", "copy");
    req.send().wait(p.io.waitScope);
  }
  REQUIRE(p.pump_until([&] { return p.answered(1, 2) == 1; }));
  auto r = lone_reply(p, 20, "copy", std::string(300 << 10, 'x')).wait(p.io.waitScope);
  CHECK(r.getDone().size() == 0);
  REQUIRE(p.pump_until([&] { return p.answered(20, 21) == 1; }));
  CHECK(p.heard.done[20].text_bytes == (300 << 10));
}

TEST_CASE("a batched submit refused as overloaded leaves a waiting lone call's answer alone",
          "[session][lone]") {
  // Tickets are the client's own: a lone call may well be ticket 0, and the refusal of a later
  // batch must not take its answer from it.
  ServerOptions o = inproc_options();
  o.max_queued_calls_per_agent = 2;
  InProcess p(std::move(o));
  {
    auto req = p.session.submitRequest();
    set_create(req.initCalls(1)[0], 1, "GateAgent", "gate");
    req.send().wait(p.io.waitScope);
  }
  REQUIRE(p.pump_until([&] { return p.answered(1, 2) == 1; }));
  g_gate.set(false);
  auto lone = lone_reply(p, 0, "gate", "first");
  REQUIRE(p.pump_until([&] { return p.server.stats().calls_running == 1; }));
  auto req = p.session.submitRequest();
  auto calls = req.initCalls(2);
  for (unsigned i = 0; i < 2; ++i) {
    set_reply(calls[i], 5 + i, "gate", "batched-" + std::to_string(i));
    write_msg(Msg("user", "b"), calls[i].initInput().initMsg());
  }
  auto r = req.send().wait(p.io.waitScope);
  REQUIRE(r.getRefused().size() == 1);
  CHECK(r.getRefused()[0].getTicket() == 6);
  g_gate.set(true);
  auto answer = lone.wait(p.io.waitScope);
  auto d = answered_in_submit(answer, 0);
  REQUIRE(d);
  CHECK(d->text_bytes == 5);
  REQUIRE(p.pump_until([&] { return p.answered(5, 6) == 1; }));
}
