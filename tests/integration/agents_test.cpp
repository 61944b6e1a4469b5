// Agents on a real as_server: server operations (create, get, delete, delete all, list, info,
// ping), ids, bad classes and arguments, agent exceptions, per-agent order, parallelism,
// memory, observe and named methods.
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <algorithm>
#include <chrono>

using namespace agentd::test;

namespace {

struct Served {
  std::unique_ptr<ServerProcess> server = ServerProcess::start(standard_args());
  Client client = server->connect();
};

}  // namespace

TEST_CASE("agents are created with client-chosen or generated ids", "[agents]") {
  Served s;
  auto chosen = s.client.create_agent("EchoAgent", "Echo One", Value::object(), "echo-1");
  CHECK(chosen.id() == "echo-1");
  CHECK(chosen.name() == "Echo One");
  CHECK(chosen.class_name() == "EchoAgent");

  auto generated = s.client.create_agent("EchoAgent");
  CHECK(generated.id().size() == 32);
  CHECK(generated.name() == generated.id());  // no name: the id
  auto other = s.client.create_agent("EchoAgent");
  CHECK(other.id() != generated.id());

  // The agent's name is what it answers with.
  CHECK(chosen.reply(Msg("user", "hi")).get().name == "Echo One");
  CHECK(generated.reply(Msg("user", "hi")).get().name == generated.id());
}

TEST_CASE("get, list, delete and delete-all manage the server's agents", "[agents]") {
  Served s;
  s.client.create_agent("EchoAgent", "A", Value::object(), "a");
  s.client.create_agent("TrailAgent", "B", Value::object(), "b");
  s.client.create_agent("FlakyAgent", "C", Value::object(), "c");

  auto b = s.client.agent("b");
  CHECK(b.id() == "b");
  CHECK(b.name() == "B");
  CHECK(b.class_name() == "TrailAgent");
  CHECK(b.reply(Msg("user", "x")).get().content == "x>B");

  auto list = s.client.list_agents();
  REQUIRE(list.size() == 3);
  CHECK(list[0].id == "a");
  CHECK(list[0].name == "A");
  CHECK(list[0].class_name == "EchoAgent");
  CHECK(list[1].class_name == "TrailAgent");
  CHECK(list[1].completed_calls == 1);
  CHECK(list[2].id == "c");

  s.client.delete_agent("b");
  CHECK(error_of([&] { s.client.agent("b"); }).code() == ErrorCode::unknown_agent);
  CHECK(error_of([&] { s.client.delete_agent("b"); }).code() == ErrorCode::unknown_agent);
  CHECK(s.client.list_agents().size() == 2);
  // A handle kept from before the delete gets a typed error, not a hang.
  auto gone = error_of([&] { b.reply(Msg("user", "x")).get(std::chrono::seconds(20)); });
  CHECK(gone.code() == ErrorCode::unknown_agent);

  CHECK(s.client.delete_all_agents() == 2);
  CHECK(s.client.list_agents().empty());
  CHECK(s.client.info().agent_count == 0);
  // The id can be used again after a delete.
  CHECK(s.client.create_agent("EchoAgent", "", Value::object(), "a").id() == "a");
}

TEST_CASE("an agent id that is taken is refused", "[agents]") {
  Served s;
  s.client.create_agent("EchoAgent", "", Value::object(), "dup");
  auto e = error_of([&] { s.client.create_agent("TrailAgent", "", Value::object(), "dup"); });
  CHECK(e.code() == ErrorCode::duplicate_agent);
  CHECK(e.agent_id() == "dup");
  CHECK(s.client.agent("dup").class_name() == "EchoAgent");  // the first one is untouched
}

TEST_CASE("an unknown class is refused, listing the classes the server knows", "[agents]") {
  Served s;
  auto e = error_of([&] { s.client.create_agent("NoSuchAgent"); });
  CHECK(e.code() == ErrorCode::unknown_class);
  CHECK_THAT(e.message(), Contains("NoSuchAgent") && Contains("EchoAgent") && Contains("TrailAgent") &&
                              Contains("FlakyAgent") && Contains("BigTextAgent"));
  CHECK(s.client.list_agents().empty());
}

TEST_CASE("a constructor that throws gives bad_args with its reason", "[agents]") {
  Served s;
  auto e = error_of([&] { s.client.create_agent("FlakyAgent", "", Value{{"fail_construct", true}}, "fc"); });
  CHECK(e.code() == ErrorCode::bad_args);
  CHECK(e.agent_id() == "fc");
  CHECK_THAT(e.message(), Contains("asked to fail in the constructor"));
  CHECK(s.client.list_agents().empty());
  // An agentd::Error(bad_args) thrown on purpose keeps its message.
  auto typed = error_of([&] { s.client.create_agent("EchoAgent", "", Value{{"sleep_ms", "soon"}}); });
  CHECK(typed.code() == ErrorCode::bad_args);
  CHECK_THAT(typed.message(), Contains("sleep_ms must be an integer"));
  // The id is free again.
  CHECK(s.client.create_agent("FlakyAgent", "", Value::object(), "fc").id() == "fc");
}

TEST_CASE(
    "an agent that throws fails that call, naming agent, class and cause, "
    "and all else goes on",
    "[agents]") {
  Served s;
  auto flaky = s.client.create_agent("FlakyAgent", "F", Value::object(), "flaky-1");
  auto echo = s.client.create_agent("EchoAgent", "E");
  auto bad = flaky.reply(Msg("user", "fail"));
  auto good_elsewhere = echo.reply(Msg("user", "still here"));
  auto e = error_of([&] { bad.get(); });
  CHECK(e.code() == ErrorCode::agent_failed);
  CHECK(e.agent_id() == "flaky-1");
  CHECK(e.agent_class() == "FlakyAgent");
  CHECK_THAT(e.message(), Contains("asked to fail"));
  CHECK_THAT(std::string(e.what()), Contains("flaky-1") && Contains("FlakyAgent"));
  CHECK_FALSE(e.retryable());
  // Reading it again gives the same error.
  CHECK(error_of([&] { bad.get(); }).code() == ErrorCode::agent_failed);
  // The failing agent, the other agents and the server carry on.
  CHECK(flaky.reply(Msg("user", "fine")).get().content == "fine");
  CHECK(good_elsewhere.get().content == "still here");
  s.client.ping();
  auto info = s.client.info();
  CHECK(info.calls_failed >= 1);
  CHECK(flaky.info().failed_calls == 1);
  CHECK(flaky.info().completed_calls == 1);

  auto weird = s.client.create_agent("WeirdThrowAgent", "", Value::object(), "weird");
  auto w = error_of([&] { weird.reply(Msg("user", "x")).get(); });
  CHECK(w.code() == ErrorCode::agent_failed);
  CHECK(w.agent_id() == "weird");
  CHECK(s.server->running());
}

TEST_CASE("calls to one agent run one at a time in the order they were made", "[agents]") {
  Served s;
  auto echo = s.client.create_agent("EchoAgent", "E");
  std::vector<agentd::Placeholder> ps;
  for (int i = 0; i < 200; ++i) ps.push_back(echo.reply(Msg("user", i)));
  for (int i = 0; i < 200; ++i) CHECK(ps[i].get().content == i);
  auto mem = echo.memory();
  REQUIRE(mem.size() == 400);  // each input and each answer
  for (int i = 0; i < 200; ++i) {
    CHECK(mem[2 * i].content == i);
    CHECK(mem[2 * i].name == "user");
    CHECK(mem[2 * i + 1].name == "E");
  }
  CHECK(echo.call("count") == 200);

  // A trail through one agent many times, each call fed the previous placeholder.
  auto t = s.client.create_agent("TrailAgent", "T");
  auto p = t.reply(Msg("user", "s"));
  std::string expect = "s>T";
  for (int i = 0; i < 20; ++i) {
    p = t.reply(p);
    expect += ">T";
  }
  CHECK(p.get().content == expect);
}

TEST_CASE("agents that block run in parallel", "[agents][parallel]") {
  Served s;
  constexpr int kAgents = 200;
  std::vector<AgentRef> agents;
  for (int i = 0; i < kAgents; ++i)
    agents.push_back(s.client.create_agent("EchoAgent", "w" + std::to_string(i), Value{{"sleep_ms", 1000}}));
  auto start = std::chrono::steady_clock::now();
  std::vector<agentd::Placeholder> ps;
  for (auto& a : agents) ps.push_back(a.reply(Msg("user", a.name())));
  for (int i = 0; i < kAgents; ++i) CHECK(ps[i].get().content == "w" + std::to_string(i));
  auto took = std::chrono::steady_clock::now() - start;
  // Sequentially this is 200 s; in parallel about 1 s. A generous bound, not a benchmark.
  CHECK(took < std::chrono::seconds(10));
  CHECK(s.client.info().workers >= 2);
}

TEST_CASE("memory, observe and named methods", "[agents]") {
  Served s;
  auto echo = s.client.create_agent("EchoAgent", "E", Value{{"prefix", "re: "}});
  CHECK(echo.memory().empty());
  echo.observe(Msg("bob", "just so you know", "user"));
  auto answer = echo.reply(Msg("alice", "hello", "user")).get();
  CHECK(answer.content == "re: hello");
  CHECK(answer.name == "E");
  CHECK(answer.role == "assistant");

  auto mem = echo.memory();
  REQUIRE(mem.size() == 3);
  CHECK(mem[0].name == "bob");
  CHECK(mem[0].content == "just so you know");
  CHECK(mem[1].content == "hello");
  CHECK(mem[2].content == "re: hello");
  CHECK(mem[2].id == answer.id);

  // Sync methods, in the agent's order (count sees the reply before it).
  CHECK(echo.call("ping") == "pong");
  CHECK(echo.call("add", Value{{"a", 2}, {"b", 3.5}}) == 5.5);
  CHECK(echo.call("count") == 1);
  auto unknown = error_of([&] { echo.call("fly"); });
  CHECK(unknown.code() == ErrorCode::unknown_method);
  CHECK(unknown.agent_id() == echo.id());
  CHECK_THAT(unknown.message(), Contains("fly") && Contains("add") && Contains("count") && Contains("ping"));
  // A method that throws on bad args names the method.
  auto bad = error_of([&] { echo.call("add", Value{{"a", 1}}); });
  CHECK(bad.code() == ErrorCode::agent_failed);
  CHECK_THAT(bad.message(), Contains("add"));

  // call_async: a placeholder whose content is the method's value.
  auto pc = echo.call_async("count");
  echo.reply(Msg("user", "one more"));
  auto pc2 = echo.call_async("count");
  CHECK(pc.get().content == 1);
  CHECK(pc2.get().content == 2);
  CHECK(error_of([&] { echo.call_async("fly").get(); }).code() == ErrorCode::unknown_method);
  // Its placeholder feeds another agent like any reply.
  auto trail = s.client.create_agent("TrailAgent", "T");
  CHECK(trail.reply(echo.call_async("ping")).get().content == "pong>T");

  // observe with a placeholder: the agent remembers the produced message.
  auto listener = s.client.create_agent("EchoAgent", "L");
  listener.observe(trail.reply(Msg("user", "seen")));
  auto lmem = listener.memory();
  REQUIRE(lmem.size() == 1);
  CHECK(lmem[0].content == "seen>T");
}

TEST_CASE("server and agent info, and ping", "[agents]") {
  Served s;
  s.client.ping();
  auto e = s.client.create_agent("EchoAgent", "E", Value::object(), "e1");
  e.reply(Msg("user", "x")).get();
  auto info = s.client.info();
  CHECK(info.server_id == s.server->server_id());
  CHECK(info.version == AGENTD_VERSION_STRING);
  CHECK(info.pid == s.server->pid());
  CHECK(info.uptime_seconds >= 0);
  CHECK(info.rss_bytes > 0);
  CHECK(info.agent_count == 1);
  CHECK(info.pool_size >= 1);
  CHECK(info.calls_completed >= 1);
  CHECK(info.max_pool_size == 8192);
  CHECK(info.max_expire_seconds == 7200);
  CHECK(info.advertise_address == "127.0.0.1:" + std::to_string(s.server->port()));
  CHECK(std::is_sorted(info.classes.begin(), info.classes.end()));
  CHECK(std::count(info.classes.begin(), info.classes.end(), "EchoAgent") == 1);
  CHECK(info.bytes_client_in > 0);
  CHECK(info.bytes_client_out > 0);

  auto ai = e.info();
  CHECK(ai.id == "e1");
  CHECK(ai.name == "E");
  CHECK(ai.class_name == "EchoAgent");
  CHECK(ai.completed_calls == 1);
  CHECK(ai.queued_calls == 0);
}

TEST_CASE("list shows the calls queued on each agent", "[agents]") {
  Served s;
  auto slow = s.client.create_agent("EchoAgent", "slow", Value{{"sleep_ms", 1000}}, "slow");
  auto p1 = slow.reply(Msg("user", 1));
  auto p2 = slow.reply(Msg("user", 2));
  auto p3 = slow.reply(Msg("user", 3));
  auto list = s.client.list_agents();
  REQUIRE(list.size() == 1);
  CHECK(list[0].queued_calls >= 2);  // one may be running; the others wait
  CHECK(s.client.info().calls_queued >= 2);
  CHECK(p3.get().content == 3);
  CHECK(s.client.list_agents()[0].queued_calls == 0);
  CHECK(s.client.list_agents()[0].completed_calls == 3);
}
