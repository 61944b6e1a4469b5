// Asynchronous agents (AsyncAgent, examples/async_agents): calls that wait on timers, models and
// other agents without holding a thread, with the same actor semantics, errors, deletion and
// shutdown behaviour as blocking agents.
#include "server_process.h"
#include "subprocess.h"  // thread_count
#include "test_names.h"

#include <signal.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;

namespace {

std::vector<std::string> async_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"--plugin", async_plugin()};
  a.insert(a.end(), extra.begin(), extra.end());
  return standard_args(a);
}

Error error_of_get(const Placeholder& p) {
  try {
    p.get(60s);
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected the call to fail");
  return Error(ErrorCode::internal, "unreachable");
}

}  // namespace

TEST_CASE("an asynchronous agent's calls run in order, each after the previous one finished", "[async]") {
  auto s = ServerProcess::start(async_args());
  Client c = s->connect();
  AgentRef a = c.create_agent("WaitAgent", "w", Value{{"sleep_ms", 0}});
  // Decreasing waits: if calls overlapped, later (shorter) ones would finish first.
  std::vector<Placeholder> ps;
  for (int i = 0; i < 10; ++i)
    ps.push_back(a.reply(Msg("user", Value{{"sleep_ms", 100 - 10 * i}, {"i", i}})));
  for (int i = 0; i < 10; ++i) CHECK(ps[i].get().content.at("i") == i);
  // Memory holds each input followed by its own answer: no call started while another waited.
  auto memory = a.memory();
  REQUIRE(memory.size() == 20);
  for (int i = 0; i < 10; ++i) {
    CHECK(memory[2 * i].content.at("i") == i);
    CHECK(memory[2 * i + 1].content.at("i") == i);
  }
}

TEST_CASE("suspended calls hold no thread: many wait at once on a server with two workers", "[async]") {
  auto s = ServerProcess::start(async_args({"--max-workers", "2"}));
  Client c = s->connect();
  constexpr int kAgents = 300;
  std::vector<AgentRef> agents = c.create_agents("WaitAgent", kAgents, Value{{"sleep_ms", 1500}});
  agents[0].call("reset_peak");
  std::vector<Placeholder> ps;
  for (auto& a : agents) ps.push_back(a.reply(Msg("user", "z")));
  // While they wait, a blocking agent on the same two-worker pool still answers.
  AgentRef echo = c.create_agent("EchoAgent", "echo");
  CHECK(echo.reply(Msg("user", "still here")).get().text() == "still here");
  const std::size_t threads_while_waiting = agentd::detail::thread_count(s->pid());
  for (auto& p : ps) CHECK(p.get().text() == "z");
  // All of them were suspended at the same time, with two worker threads at most.
  CHECK(agents[0].call("peak").get<int>() == kAgents);
  CHECK(threads_while_waiting < 16);
}

TEST_CASE("asynchronous methods, model calls and blocking work moved off the loop", "[async]") {
  auto s = ServerProcess::start(async_args());
  Client c = s->connect();
  AgentRef w = c.create_agent("WaitAgent", "w");
  CHECK(w.call("nap", Value{{"ms", 20}}).get<int>() == 20);
  CHECK(w.call_async("nap", Value{{"ms", 5}}).get().content == 5);
  CHECK(w.call("peak").is_number_integer());  // a blocking method of an AsyncAgent
  Error unknown = [&] {
    try {
      w.call("nope");
    } catch (const Error& e) {
      return e;
    }
    return Error(ErrorCode::internal, "no error");
  }();
  CHECK(unknown.code() == ErrorCode::unknown_method);
  CHECK_THAT(unknown.message(), Contains("nap") && Contains("peak"));

  AgentRef ask = c.create_agent("AskAgent", "ask");
  CHECK(ask.reply(Msg("user", "hello async world")).get().text() == "hello async world");
  AgentRef streamer = c.create_agent("AskAgent", "ask-stream", Value{{"stream", true}});
  Msg streamed = streamer.reply(Msg("user", "one two three")).get();
  CHECK(streamed.text() == "one two three");
  CHECK(streamed.metadata.at("chunks") == 3);
  // Read as a stream, the model's chunks reach the caller as they come, then the whole reply.
  Placeholder live = ask.reply_stream(Msg("user", "alpha beta gamma delta"));
  std::string joined;
  int pieces = 0;
  for (const std::string& chunk : live.chunks()) {
    joined += chunk;
    ++pieces;
  }
  CHECK(pieces == 4);
  CHECK(joined == "alpha beta gamma delta");
  CHECK(live.get().text() == "alpha beta gamma delta");
  // The model calls count toward the agent's usage as blocking ones do.
  auto traces = c.traces();
  bool counted = std::any_of(traces.begin(), traces.end(), [&](const auto& span) {
    return span.agent_id == ask.id() && span.model_calls == 1;
  });
  CHECK(counted);

  AgentRef off = c.create_agent("OffloadAgent", "off");
  Msg r = off.reply(Msg("user", Value{{"block_ms", 20}})).get();
  CHECK(r.content.at("worker_thread") != r.content.at("loop_thread"));
  CHECK(r.content.at("resumed_on_loop") == true);
}

TEST_CASE("an asynchronous agent awaits other agents' placeholders, here and on another server", "[async]") {
  auto a = ServerProcess::start(async_args());
  auto b = ServerProcess::start(async_args());
  Client ca = a->connect();
  Client cb = b->connect();
  AgentRef here = ca.create_agent("EchoAgent", "here", Value{{"prefix", "a:"}});
  AgentRef there = cb.create_agent("WaitAgent", "there", Value{{"sleep_ms", 50}});
  AgentRef r1 = ca.create_agent("AsyncRelayAgent", "r1", Value{{"target", here.to_value()}});
  AgentRef r2 = ca.create_agent("AsyncRelayAgent", "r2", Value{{"target", there.to_value()}});
  CHECK(r1.reply(Msg("user", "x")).get().text() == "relayed: a:x");
  CHECK(r2.reply(Msg("user", "y")).get().text() == "relayed: y");
  // A chain through placeholders: the relay's result feeds a blocking agent on the other server.
  AgentRef echo_b = cb.create_agent("EchoAgent", "echo-b", Value{{"prefix", "b:"}});
  CHECK(echo_b.reply(r2.reply(Msg("user", "z"))).get().text() == "b:relayed: z");
  // An asynchronous agent consumes a placeholder input like any agent.
  CHECK(r1.reply(there.reply(Msg("user", "w"))).get().text() == "relayed: a:w");
}

TEST_CASE("an error after a suspension fails the call like a blocking agent's, the agent lives", "[async]") {
  auto s = ServerProcess::start(async_args());
  Client c = s->connect();
  AgentRef w = c.create_agent("WaitAgent", "w", Value{{"sleep_ms", 20}});
  Error e = error_of_get(w.reply(Msg("user", "fail")));
  CHECK(e.code() == ErrorCode::agent_failed);
  CHECK(e.agent_id() == w.id());
  CHECK(e.agent_class() == "WaitAgent");
  CHECK_THAT(e.message(), Contains("after waiting"));
  // Consumers of the failed call fail with the same cause; the agent goes on.
  AgentRef echo = c.create_agent("EchoAgent", "echo");
  CHECK(error_of_get(echo.reply(w.reply(Msg("user", "fail")))).code() == ErrorCode::agent_failed);
  CHECK(w.reply(Msg("user", "ok")).get().text() == "ok");
  // Blocking calls inside asynchronous code are refused, not deadlocked.
  AgentRef bad = c.create_agent("AsyncRelayAgent", "bad-args", Value{{"target", 1}});
  CHECK(error_of_get(bad.reply(Msg("user", "x"))).code() != ErrorCode::internal);
}

TEST_CASE("deleting an agent with a suspended call: the call finishes, the later ones fail", "[async]") {
  auto s = ServerProcess::start(async_args());
  Client c = s->connect();
  // The same sequence on a blocking and an asynchronous agent gives the same outcomes.
  for (const std::string cls : {"EchoAgent", "WaitAgent"}) {
    CAPTURE(cls);
    AgentRef a = c.create_agent(cls, "", Value{{"sleep_ms", 300}});
    Placeholder running = a.reply(Msg("user", "first"));
    Placeholder queued = a.reply(Msg("user", "second"));
    REQUIRE(wait_until([&] { return a.info().queued_calls == 2; }, 10s));
    c.delete_agent(a.id());
    CHECK(running.get(30s).text() == "first");
    CHECK(error_of_get(queued).code() == ErrorCode::unknown_agent);
  }
  CHECK(c.info().agent_count == 0);
}

TEST_CASE("stopping a server with suspended calls ends them within the grace period", "[async]") {
  auto s = ServerProcess::start(async_args({"--shutdown-grace", "0.5"}));
  ClientOptions o;
  o.reconnect_deadline = 1s;  // nothing restarts the server: stop reconnecting soon
  Client c = s->connect(o);
  AgentRef a = c.create_agent("WaitAgent", "w", Value{{"sleep_ms", 600000}});
  Placeholder p = a.reply(Msg("user", "never"));
  REQUIRE(wait_until([&] { return c.info().calls_queued == 1; }, 10s));
  ExitResult r = s->signal_and_wait(SIGTERM, 20s);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("abandoned"));
  Error e = error_of_get(p);
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(e.retryable());
}
