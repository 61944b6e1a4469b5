// CallRunner: blocking and asynchronous agents through the one run path (same kinds, same
// outputs, same errors), an asynchronous call that suspends and is resumed, suspended calls
// destroyed with the runner, and a blocking call skipped at its deadline.
#include "call_runner.h"

#include "model_registry.h"
#include "test_names.h"

#include <catch2/catch.hpp>

#include <coroutine>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace agentd::test;
using namespace agentd::detail;

namespace {

// Replies with its input's text and its name; method "double" doubles args.n, "boom" throws.
class Blocking : public agentd::Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override {
    ++ran;
    if (x.text() == "fail") throw std::runtime_error("cannot take 'fail'");
    return Msg("", x.text() + ">" + name());
  }
  void observe(const Msg& x) override {
    ++ran;
    memory().add(x);
  }
  Value call(const std::string& method, const Value& args) override {
    ++ran;
    if (method == "boom") throw Error(ErrorCode::bad_args, "no boom today");
    return Value(args["n"].get<int>() * 2);
  }
  int ran = 0;
};

// Suspends until resumed from outside (the test), as a timer or a model call would.
struct ResumeGate {
  std::coroutine_handle<> waiting;
  bool open = false;
  struct Awaiter {
    ResumeGate& gate;
    bool await_ready() const noexcept { return gate.open; }
    void await_suspend(std::coroutine_handle<> h) noexcept { gate.waiting = h; }
    void await_resume() const noexcept {}
  };
  Awaiter wait() { return Awaiter{*this}; }
  void release() {
    open = true;
    if (auto h = std::exchange(waiting, nullptr)) h.resume();
  }
};

// The asynchronous twin of Blocking; with a gate set, each call waits on it first.
class Async : public agentd::AsyncAgent {
 public:
  using AsyncAgent::AsyncAgent;
  agentd::Task<Msg> reply_async(const Msg& x) override {
    ++ran;
    if (gate != nullptr) co_await gate->wait();
    if (x.text() == "fail") throw std::runtime_error("cannot take 'fail'");
    co_return Msg("", x.text() + ">" + name());
  }
  agentd::Task<void> observe_async(const Msg& x) override {
    ++ran;
    memory().add(x);
    co_return;
  }
  agentd::Task<Value> call_async(const std::string& method, const Value& args) override {
    ++ran;
    if (method == "boom") throw Error(ErrorCode::bad_args, "no boom today");
    co_return Value(args["n"].get<int>() * 2);
  }
  ResumeGate* gate = nullptr;
  int ran = 0;
};

// The runner's host: no store, no chunks; remembers the calls that finished.
class FakeHost final : public CallRunner::Host {
 public:
  StateStore* store() const override { return nullptr; }
  bool skip_expired(const AgentSlot&, Call& call) override {
    if (!expire_all) return false;
    call.out_error = Error(ErrorCode::timeout, "deadline passed");
    return true;
  }
  std::function<void(std::string_view)> chunk_sink(const Call&) override { return {}; }
  void finished(const std::shared_ptr<AgentSlot>& slot, std::shared_ptr<Call> call) override {
    CHECK(slot->mailbox.front() == call);
    done.push_back(std::move(call));
  }
  bool expire_all = false;
  std::vector<std::shared_ptr<Call>> done;
};

template <typename A>
std::shared_ptr<AgentSlot> slot_of(const std::string& id) {
  auto s = std::make_shared<AgentSlot>();
  s->id = id;
  s->name = id;
  s->class_name = "Cls";
  s->agent = std::make_unique<A>(agentd::AgentInit{id, id, "Cls", Value::object(), nullptr});
  s->async = dynamic_cast<agentd::AsyncAgent*>(s->agent.get());
  s->usage = std::make_shared<UsageCounter>();
  s->busy = true;  // as the host dispatches a call
  s->constructing = false;
  return s;
}

std::shared_ptr<Call> call_of(Call::Kind kind, const std::string& text = "", const std::string& method = "",
                              Value args = Value::object()) {
  auto c = std::make_shared<Call>();
  c->kind = kind;
  c->method = method;
  c->args = std::move(args);
  if (!text.empty()) c->input = std::make_shared<const Outcome>(Msg("user", text));
  return c;
}

// Runs c on slot as the host would (c at the head of the mailbox).
void run(CallRunner& runner, const std::shared_ptr<AgentSlot>& slot, const std::shared_ptr<Call>& c) {
  slot->mailbox.push_back(c);
  runner.run(slot, c);
}

template <typename A>
void same_outcomes(const std::string& id) {
  FakeHost host;
  CallRunner runner(host);
  auto slot = slot_of<A>(id);

  auto reply = call_of(Call::Kind::reply, "hi");
  run(runner, slot, reply);
  REQUIRE(host.done.size() == 1);
  REQUIRE(reply->out_msg);
  CHECK(reply->out_msg->content == "hi>" + id);
  CHECK(reply->out_msg->name == id);  // the agent left it empty
  CHECK_FALSE(reply->out_msg->id.empty());
  CHECK(reply->started.time_since_epoch().count() != 0);
  slot->mailbox.clear();

  auto observe = call_of(Call::Kind::observe, "remember me");
  run(runner, slot, observe);
  CHECK_FALSE(observe->out_error);
  slot->mailbox.clear();

  auto memory = call_of(Call::Kind::memory);
  run(runner, slot, memory);
  REQUIRE(memory->out_memory.size() == 1);
  CHECK(memory->out_memory[0].text() == "remember me");
  slot->mailbox.clear();

  auto method = call_of(Call::Kind::method, "", "double", Value{{"n", 21}});
  run(runner, slot, method);
  CHECK(method->out_value == Value(42));
  slot->mailbox.clear();

  auto method_async = call_of(Call::Kind::method_async, "", "double", Value{{"n", 2}});
  run(runner, slot, method_async);
  REQUIRE(method_async->out_msg);
  CHECK(method_async->out_msg->name == id);
  slot->mailbox.clear();

  auto snapshot = call_of(Call::Kind::snapshot);
  run(runner, slot, snapshot);
  CHECK(snapshot->out_value.contains("state"));
  CHECK(snapshot->out_memory.size() == 1);
  slot->mailbox.clear();

  auto failing = call_of(Call::Kind::reply, "fail");
  run(runner, slot, failing);
  REQUIRE(failing->out_error);
  CHECK(failing->out_error->code() == ErrorCode::agent_failed);
  CHECK(failing->out_error->agent_id() == id);
  CHECK(failing->out_error->agent_class() == "Cls");
  CHECK(failing->out_error->message() == "reply raised: cannot take 'fail'");
  slot->mailbox.clear();

  auto boom = call_of(Call::Kind::method, "", "boom");
  run(runner, slot, boom);
  REQUIRE(boom->out_error);
  CHECK(boom->out_error->code() == ErrorCode::bad_args);  // an Error keeps its code
  CHECK(boom->out_error->message() == "method 'boom' failed: no boom today");
  slot->mailbox.clear();

  CHECK(host.done.size() == 8);
  for (const auto& c : host.done) CHECK(c->model_calls == 0);
}

}  // namespace

TEST_CASE("blocking and asynchronous agents run through one path with the same outcomes", "[call_runner]") {
  SECTION("blocking") { same_outcomes<Blocking>("b"); }
  SECTION("asynchronous") { same_outcomes<Async>("a"); }
}

TEST_CASE("an asynchronous call that suspends finishes when it is resumed", "[call_runner]") {
  FakeHost host;
  CallRunner runner(host);
  auto slot = slot_of<Async>("a");
  ResumeGate gate;
  static_cast<Async&>(*slot->agent).gate = &gate;
  auto c = call_of(Call::Kind::reply, "later");
  run(runner, slot, c);
  CHECK(host.done.empty());  // suspended: the runner returned at the first suspension
  gate.release();
  REQUIRE(host.done.size() == 1);
  CHECK(c->out_msg->content == "later>a");
}

TEST_CASE("asynchronous calls still suspended are destroyed with the runner", "[call_runner]") {
  FakeHost host;
  auto slot = slot_of<Async>("a");
  ResumeGate gate;
  static_cast<Async&>(*slot->agent).gate = &gate;
  auto c = call_of(Call::Kind::reply, "never");
  {
    CallRunner runner(host);
    run(runner, slot, c);
    CHECK(c.use_count() == 3);  // the test, the mailbox and the suspended frame
  }
  CHECK(c.use_count() == 2);  // the frame is gone
  CHECK(host.done.empty());
}

TEST_CASE("a suspended call that finishes leaves the others to be destroyed with the runner",
          "[call_runner]") {
  FakeHost host;
  std::vector<std::shared_ptr<AgentSlot>> slots;
  std::vector<ResumeGate> gates(4);
  std::vector<std::shared_ptr<Call>> calls;
  {
    CallRunner runner(host);
    for (int i = 0; i < 4; ++i) {
      slots.push_back(slot_of<Async>("a" + std::to_string(i)));
      static_cast<Async&>(*slots.back()->agent).gate = &gates[i];
      calls.push_back(call_of(Call::Kind::reply, "x"));
      run(runner, slots.back(), calls.back());
    }
    // The newest, an inner one and the oldest finish; one stays suspended.
    for (int i : {3, 1, 0}) gates[i].release();
    REQUIRE(host.done.size() == 3);
    CHECK(calls[2].use_count() == 3);  // the test, the mailbox and its frame
  }
  CHECK(calls[2].use_count() == 2);
  CHECK(host.done.size() == 3);
}

TEST_CASE("a blocking call whose deadline passed before it started runs no agent code", "[call_runner]") {
  FakeHost host;
  host.expire_all = true;
  CallRunner runner(host);
  auto slot = slot_of<Blocking>("b");
  auto c = call_of(Call::Kind::reply, "hi");
  run(runner, slot, c);
  REQUIRE(host.done.size() == 1);
  CHECK(static_cast<Blocking&>(*slot->agent).ran == 0);
  REQUIRE(c->out_error);
  CHECK(c->out_error->code() == ErrorCode::timeout);
}
