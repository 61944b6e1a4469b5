// AgentHost in-process (no sockets): per-agent FIFO even behind an unresolved input, upstream
// errors pass through without running, constructor failures, deletion of queued calls.
#include "agent_host.h"

#include "agent_services.h"
#include "async_loop.h"
#include "bridge.h"
#include "model_registry.h"
#include "plugin_loader.h"
#include "result_pool.h"
#include "worker_pool.h"
#include "test_names.h"

#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <stdexcept>

using namespace agentd::test;
using namespace agentd::detail;

namespace {

// Appends its name to the input's text and remembers every input.
class Appender : public agentd::Agent {
 public:
  explicit Appender(agentd::AgentInit init) : Agent(std::move(init)) {
    if (args().contains("explode")) throw std::runtime_error("constructor exploded");
  }
  Msg reply(const Msg& x) override {
    memory().add(x);
    if (x.text() == "fail") throw std::runtime_error("cannot take 'fail'");
    return Msg(name(), x.text() + ">" + name());
  }
};

// What the host needs of a server: usage counters. These agents use no models or references.
class NoServices final : public AgentServices {
 public:
  std::shared_ptr<agentd::ChatModel> model(const std::string& config, const std::string&) override {
    throw Error(ErrorCode::config_error, "no model configs in this test: " + config);
  }
  std::shared_ptr<UsageCounter> usage_counter(const std::string&) override {
    return std::make_shared<UsageCounter>();
  }
  void forget_agent(const std::string&) override {}
  std::shared_ptr<agentd::Tools> tools(const std::string&) override {
    throw Error(ErrorCode::config_error, "no tools in this test");
  }
  std::shared_ptr<agentd::detail::AgentLink> link_to(const std::string&, std::uint16_t,
                                                     const std::string&) override {
    throw Error(ErrorCode::bad_args, "no other agents in this test");
  }
};

class IgnoreErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&&) override {}
};

struct Fixture {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  IgnoreErrors ignore;
  kj::TaskSet tasks{ignore};
  ClassCatalog catalog;
  NoServices services;
  Bridge bridge{io.unixEventPort};
  WorkerPool workers{2, 64};
  WorkerPool lifecycle{1, 8};
  LoopScheduler scheduler{io.provider->getTimer(), bridge, workers};
  AgentHost host{catalog, services, workers, lifecycle, bridge, scheduler, ResultPool::Limits{}};

  Fixture() {
    catalog.add(agentd::agent_class<Appender>("Appender"), "test");
    tasks.add(bridge.run());
  }
  ~Fixture() {
    bridge.close();
    host.remove_all();
    workers.stop();
  }

  // Runs the loop until pred holds (or 10 s pass).
  bool run_until(const std::function<bool()>& pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(io.waitScope);
    }
    return true;
  }

  std::string create(const std::string& id, Value args = Value::object()) {
    bool done = false;
    auto r = host.create("Appender", id, std::move(args), id, [&](auto) { done = true; });
    REQUIRE(std::holds_alternative<std::string>(r));
    REQUIRE(run_until([&] { return done; }));
    return std::get<std::string>(r);
  }

  std::shared_ptr<Call> reply_call(const std::string& agent, const std::string& call_id,
                                   std::optional<std::string> text) {
    auto c = std::make_shared<Call>();
    c->kind = Call::Kind::reply;
    c->call_id = call_id;
    if (text) c->input = std::make_shared<const Outcome>(Msg("user", *text));
    REQUIRE(host.announce_result(call_id, agent));
    return c;
  }

  OutcomePtr outcome(const std::string& call_id) {
    run_until([&] { return host.peek_result(call_id) != nullptr; });
    return host.peek_result(call_id);
  }
};

}  // namespace

TEST_CASE("unknown classes and taken ids are refused at once", "[agent_host]") {
  Fixture f;
  auto r = f.host.create("Nope", "", Value::object(), "x", nullptr);
  REQUIRE(std::holds_alternative<Error>(r));
  CHECK(std::get<Error>(r).code() == ErrorCode::unknown_class);
  CHECK_THAT(std::get<Error>(r).message(), Contains("Appender"));
  f.create("a");
  auto dup = f.host.create("Appender", "", Value::object(), "a", nullptr);
  REQUIRE(std::holds_alternative<Error>(dup));
  CHECK(std::get<Error>(dup).code() == ErrorCode::duplicate_agent);
}

TEST_CASE("a call waiting on its input holds back the calls behind it", "[agent_host]") {
  Fixture f;
  f.create("a");
  auto first = f.reply_call("a", "c1", std::nullopt);
  first->input_ready = false;
  f.host.enqueue("a", first);
  auto deliver = f.host.input_waiter("a", first);
  auto second = f.reply_call("a", "c2", "second");
  f.host.enqueue("a", second);
  // The second call is ready but must not overtake the first: nothing was started.
  CHECK(f.host.running_calls() == 0);
  CHECK(f.host.info("a")->queued == 2);
  CHECK(f.host.peek_result("c2") == nullptr);
  deliver(std::make_shared<const Outcome>(Msg("user", "first")));
  auto o2 = f.outcome("c2");
  REQUIRE(o2);
  CHECK(std::get<Msg>(*f.outcome("c1")).content == "first>a");
  CHECK(std::get<Msg>(*o2).content == "second>a");
}

TEST_CASE("an upstream error fails the call without running it", "[agent_host]") {
  Fixture f;
  f.create("a");
  auto c = f.reply_call("a", "c1", std::nullopt);
  c->input =
      std::make_shared<const Outcome>(Error(ErrorCode::agent_failed, "upstream broke", "up", "UpClass"));
  f.host.enqueue("a", c);
  auto o = f.outcome("c1");
  REQUIRE(o);
  const auto& e = std::get<Error>(*o);
  CHECK(e.agent_id() == "up");
  CHECK(e.agent_class() == "UpClass");
  // The agent itself never saw it: a later call is its first input.
  auto next = f.reply_call("a", "c2", "x");
  f.host.enqueue("a", next);
  REQUIRE(f.outcome("c2"));
  CHECK(f.host.info("a")->failed == 1);
}

TEST_CASE("agent code that throws fails only that call", "[agent_host]") {
  Fixture f;
  f.create("a");
  f.host.enqueue("a", f.reply_call("a", "c1", "fail"));
  f.host.enqueue("a", f.reply_call("a", "c2", "ok"));
  const auto& e = std::get<Error>(*f.outcome("c1"));
  CHECK(e.code() == ErrorCode::agent_failed);
  CHECK(e.agent_id() == "a");
  CHECK(e.agent_class() == "Appender");
  CHECK_THAT(e.message(), Contains("cannot take 'fail'"));
  CHECK(std::get<Msg>(*f.outcome("c2")).content == "ok>a");
}

TEST_CASE("a constructor that throws fails the calls queued for it with bad_args", "[agent_host]") {
  Fixture f;
  std::optional<std::variant<AgentInfoRow, Error>> done;
  auto r = f.host.create("Appender", "", Value{{"explode", true}}, "boom",
                         [&](std::variant<AgentInfoRow, Error> v) { done = std::move(v); });
  REQUIRE(std::holds_alternative<std::string>(r));
  f.host.enqueue("boom", f.reply_call("boom", "c1", "x"));
  REQUIRE(f.run_until([&] { return done.has_value(); }));
  REQUIRE(std::holds_alternative<Error>(*done));
  CHECK(std::get<Error>(*done).code() == ErrorCode::bad_args);
  CHECK_THAT(std::get<Error>(*done).message(), Contains("constructor exploded"));
  const auto& e = std::get<Error>(*f.outcome("c1"));
  CHECK(e.code() == ErrorCode::bad_args);
  CHECK_FALSE(f.host.exists("boom"));
}

TEST_CASE("deleting an agent fails its queued calls with unknown_agent", "[agent_host]") {
  Fixture f;
  f.create("a");
  auto blocked = f.reply_call("a", "c1", std::nullopt);
  blocked->input_ready = false;
  f.host.enqueue("a", blocked);
  f.host.enqueue("a", f.reply_call("a", "c2", "x"));
  CHECK(f.host.info("a")->queued == 2);
  CHECK(f.host.remove("a"));
  CHECK_FALSE(f.host.exists("a"));
  CHECK(std::get<Error>(*f.outcome("c1")).code() == ErrorCode::unknown_agent);
  CHECK(std::get<Error>(*f.outcome("c2")).code() == ErrorCode::unknown_agent);
  CHECK_FALSE(f.host.remove("a"));
  auto late = f.reply_call("a", "c3", "x");
  f.host.enqueue("a", late);
  CHECK(std::get<Error>(*f.outcome("c3")).code() == ErrorCode::unknown_agent);
}

TEST_CASE("what a call's outcome runs may call back into the host", "[agent_host]") {
  // The host lock is not recursive: waiters and completions run after it is released.
  Fixture f;
  f.create("a");
  bool called = false;
  f.host.when_result(
      "c1",
      [&](const OutcomePtr& o) {
        CHECK(std::get<Msg>(*o).content == "one>a");
        CHECK(f.host.peek_result("c1") != nullptr);
        CHECK(f.host.info("a")->completed >= 1);
        f.host.enqueue("a", f.reply_call("a", "c2", "two"));
        called = true;
      },
      /*wait_for_unknown=*/true);
  f.host.enqueue("a", f.reply_call("a", "c1", "one"));
  REQUIRE(f.run_until([&] { return called; }));
  CHECK(std::get<Msg>(*f.outcome("c2")).content == "two>a");
  // A waiter registered for a finished result runs at once (after the lock), and may call in.
  bool again = false;
  f.host.when_result(
      "c2", [&](const OutcomePtr&) { again = f.host.exists("a"); }, false);
  CHECK(again);
}

TEST_CASE("an agent's outcomes reach the loop in the order its calls ran", "[agent_host]") {
  Fixture f;
  f.create("a");
  std::vector<std::string> order;
  std::vector<std::string> expected;
  for (int i = 0; i < 200; ++i) {
    const std::string id = "o" + std::to_string(i);
    expected.push_back(id);
    auto c = f.reply_call("a", id, "x");
    f.host.when_result(
        id, [&order, id](const OutcomePtr&) { order.push_back(id); }, false);
    f.host.enqueue("a", c);
  }
  REQUIRE(f.run_until([&] { return order.size() == expected.size(); }));
  CHECK(order == expected);
}

TEST_CASE("a clone starts from its source's memory, taken in call order", "[agent_host]") {
  Fixture f;
  f.create("a");
  f.host.enqueue("a", f.reply_call("a", "c1", "remembered"));
  std::optional<std::variant<AgentInfoRow, Error>> done;
  auto err = f.host.clone("a", "b", "b", [&](std::variant<AgentInfoRow, Error> r) { done = std::move(r); });
  REQUIRE_FALSE(err);
  REQUIRE(f.run_until([&] { return done.has_value(); }));
  REQUIRE(std::holds_alternative<AgentInfoRow>(*done));
  CHECK(std::get<AgentInfoRow>(*done).id == "b");
  auto memory = std::make_shared<Call>();
  memory->kind = Call::Kind::memory;
  memory->has_on_done = true;
  std::vector<Msg> seen;
  bool read = false;
  memory->on_done = [&](Call& c) {
    seen = c.out_memory;
    read = true;
  };
  f.host.enqueue("b", memory);
  REQUIRE(f.run_until([&] { return read; }));
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].text() == "remembered");
}

TEST_CASE("a call answered early is counted before its answer and published after it", "[agent_host]") {
  // What a lane does (server/lanes.cpp): the call runs on the caller's thread, and EarlyAnswer's
  // send writes the answer from inside the host, before the result pool has it.
  Fixture f;
  const std::string a = f.create("a");
  const std::string call_id = "early0000000000000000000000000000";
  auto call = f.reply_call(a, call_id, "hi");
  EarlyAnswer early;
  early.call = call.get();
  std::string answered;
  std::uint64_t completed_then = 0, server_completed_then = 0;
  bool published_then = true, settled_then = true;
  std::size_t running_then = 1, queued_then = 1, agent_queued_then = 1;
  early.send = [&](const Call& c) {
    settled_then = f.host.settled();
    answered = c.out_msg ? c.out_msg->text() : "(no message)";
    completed_then = f.host.info(a)->completed;
    server_completed_then = f.host.calls_completed();
    published_then = f.host.peek_result(call_id) != nullptr;
    running_then = f.host.running_calls();
    queued_then = f.host.queued_calls();
    agent_queued_then = f.host.info(a)->queued;
    return true;
  };
  t_early_answer = &early;
  f.host.run_here(a, std::move(call));
  t_early_answer = nullptr;
  CHECK(early.sent);
  CHECK(answered == "hi>a");
  CHECK(completed_then == 1);
  CHECK(server_completed_then == 1);
  CHECK_FALSE(published_then);
  // Not running or queued any more, for the server and for its agent, though still at the head
  // of its mailbox.
  CHECK(running_then == 0);
  CHECK(queued_then == 0);
  CHECK(agent_queued_then == 0);
  // But not settled: a stop that exited now would lose the answer being written.
  CHECK_FALSE(settled_then);
  CHECK(f.host.settled());
  // Published (and the agent free) by the time run_here() returned on this thread.
  auto o = f.host.peek_result(call_id);
  REQUIRE(o != nullptr);
  CHECK(std::get<Msg>(*o).text() == "hi>a");

  // Another call's EarlyAnswer, or a call that does not run on this thread, is not sent early.
  auto other = f.reply_call(a, "early1000000000000000000000000000", "again");
  EarlyAnswer not_this;
  not_this.call = nullptr;
  not_this.send = [&](const Call&) { return true; };
  t_early_answer = &not_this;
  f.host.run_here(a, std::move(other));
  t_early_answer = nullptr;
  CHECK_FALSE(not_this.sent);
  CHECK(f.outcome("early1000000000000000000000000000") != nullptr);
}

TEST_CASE("the host is not settled until a finished call's outcome has been handed on", "[agent_host]") {
  // A stop waits for settled(), not for no call running (Server::drain): the thread that
  // finished the last call hands its outcome on (to the loop, or a lane's waiter) after it
  // released the host lock, and the stop's last writes must come after that.
  Fixture f;
  const std::string a = f.create("a");
  const std::string call_id = "settle000000000000000000000000000";
  std::size_t running_then = 1;
  bool settled_then = true;
  bool handed_on = false;
  REQUIRE(f.host.announce_result_here(call_id, a, [&](const OutcomePtr& o) {
    running_then = f.host.running_calls();
    settled_then = f.host.settled();
    handed_on = o != nullptr;
  }));
  auto call = std::make_shared<Call>();
  call->kind = Call::Kind::reply;
  call->call_id = call_id;
  call->input = std::make_shared<const Outcome>(Msg("user", "hi"));
  f.host.run_here(a, std::move(call));  // runs on this thread, and so does the waiter
  CHECK(handed_on);
  CHECK(running_then == 0);
  CHECK_FALSE(settled_then);
  CHECK(f.host.settled());
}
