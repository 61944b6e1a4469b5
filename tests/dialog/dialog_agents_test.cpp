// DialogAgent and ReActAgent (examples/dialog, libdialog_agents.so) on a real as_server whose
// model configs point at the fake OpenAI-compatible server: real HTTP completions, a tool call
// round, the max_iters bound, bad config names, usage in info; and the dialog demo program.
#include "fake_model_server.h"
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace agentd::test;

namespace {

// One openai_chat config named `config_name` at the fake server's `scenario` under `key`.
std::string openai_config(const std::string& config_name, const std::string& key,
                          const std::string& scenario) {
  return fake_model_server().openai_config(config_name, key, scenario);
}

// A server with the dialog plugin and the given model config file text.
struct Served {
  explicit Served(const std::string& models_yaml)
      : config(dir.write("models.yaml", models_yaml)),
        server(ServerProcess::start(
            standard_args({"--plugin", AGENTD_DIALOG_PLUGIN, "--model-config-path", config}))),
        client(server->connect()) {}
  TempDir dir;
  std::string config;
  std::unique_ptr<ServerProcess> server;
  Client client;
};

// The messages of the n-th request the fake server got under key.
Value request_messages(const std::string& key, std::size_t n) {
  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() > n);
  return reqs[n]["body"]["messages"];
}

}  // namespace

TEST_CASE("DialogAgent answers from a real HTTP completion and remembers the dialogue", "[dialog]") {
  const std::string key = unique_key("dialog");
  Served s(openai_config("fake", key, "ok"));
  auto alice = s.client.create_agent("DialogAgent", "Alice",
                                     Value{{"sys_prompt", "Be brief."}, {"model_config_name", "fake"}});

  Msg a1 = alice.reply(Msg("user", "hello there", "user")).get();
  CHECK(a1.content == "echo: hello there");
  CHECK(a1.name == "Alice");
  CHECK(a1.role == "assistant");
  CHECK(a1.metadata["config_name"] == "fake");

  // Another agent's answer reaches the model as a "user" message.
  Msg a2 = alice.reply(Msg("Bob", "how are you", "assistant")).get();
  CHECK(a2.content == "echo: how are you");

  Value second = request_messages(key, 1);
  REQUIRE(second.size() == 4);
  CHECK(second[0] == Value{{"role", "system"}, {"content", "Be brief."}});
  CHECK(second[1] == Value{{"role", "user"}, {"content", "hello there"}});
  CHECK(second[2] == Value{{"role", "assistant"}, {"content", "echo: hello there"}});
  CHECK(second[3] == Value{{"role", "user"}, {"content", "how are you"}});
  CHECK(fake_model_server().requests(key)[0]["body"]["model"] == "test-model");

  auto memory = alice.memory();
  REQUIRE(memory.size() == 4);
  CHECK(memory[3].content == "echo: how are you");

  // Usage: the agent's own tally and the server's total.
  Value usage = alice.call("usage");
  CHECK(usage["calls"] == 2);
  CHECK(usage["prompt_tokens"].get<std::int64_t>() > 0);
  CHECK(usage["completion_tokens"].get<std::int64_t>() > 0);
  auto info = s.client.info();
  CHECK(info.model_calls == 2);
  CHECK(info.model_errors == 0);
  CHECK(info.model_prompt_tokens == usage["prompt_tokens"].get<std::int64_t>());
  CHECK(info.model_completion_tokens == usage["completion_tokens"].get<std::int64_t>());
}

TEST_CASE("DialogAgent uses the built-in echo model by default", "[dialog]") {
  Served s("");
  auto a = s.client.create_agent("DialogAgent", "Echoer");
  CHECK(a.reply(Msg("user", "just this", "user")).get().content == "just this");
  CHECK(s.client.info().model_calls == 1);
}

TEST_CASE("a bad model config name is refused at creation, naming the known configs", "[dialog]") {
  const std::string key = unique_key("dialog");
  Served s(openai_config("fake", key, "ok"));
  auto e = error_of([&] {
    s.client.create_agent("DialogAgent", "Lost", Value{{"model_config_name", "nope"}}, "lost-1");
  });
  CHECK(e.code() == ErrorCode::config_error);
  CHECK_THAT(e.message(), Contains("'nope'") && Contains("known model configs: echo, fake"));
  // Nothing was sent to the endpoint.
  CHECK(fake_model_server().requests(key).empty());

  auto bad_args = error_of([&] { s.client.create_agent("DialogAgent", "X", Value{{"sys_prompt", 3}}); });
  CHECK(bad_args.code() == ErrorCode::bad_args);
  CHECK_THAT(bad_args.message(), Contains("sys_prompt"));
}

TEST_CASE("a failing endpoint reaches the caller as model_error", "[dialog]") {
  const std::string key = unique_key("dialog");
  Served s(openai_config("broken", key, "fail-500-0"));
  auto a = s.client.create_agent("DialogAgent", "D", Value{{"model_config_name", "broken"}});
  auto e = error_of([&] { a.reply(Msg("user", "hi", "user")).get(); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK_THAT(e.message(), Contains("broken") && Contains("500"));
  CHECK(s.client.info().model_errors == 1);
}

TEST_CASE("ReActAgent runs a tool call round, then answers", "[dialog][react]") {
  const std::string key = unique_key("react");
  Served s(openai_config("react", key, "react"));
  auto r = s.client.create_agent("ReActAgent", "Solver",
                                 Value{{"sys_prompt", "Use tools."}, {"model_config_name", "react"}});

  Msg answer = r.reply(Msg("user", "what is 6 times 7?", "user")).get();
  CHECK(answer.content == "final: 42");
  CHECK(answer.name == "Solver");
  CHECK(answer.metadata["iterations"] == 2);
  REQUIRE(answer.metadata["tool_results"].size() == 1);
  CHECK(answer.metadata["tool_results"][0]["name"] == "calculator");
  CHECK(answer.metadata["tool_results"][0]["result"] == "42");
  CHECK(answer.metadata["tool_results"][0]["arguments"] == Value{{"a", 6}, {"b", 7}, {"op", "*"}});

  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() == 2);
  // The tools went with each request, in OpenAI's shape.
  Value tools = reqs[0]["body"]["tools"];
  REQUIRE(tools.is_array());
  std::vector<std::string> names;
  for (const auto& t : tools) names.push_back(t["function"]["name"].get<std::string>());
  CHECK(names == std::vector<std::string>{"calculator", "current_time", "echo"});
  CHECK(tools[0]["type"] == "function");
  CHECK(tools[0]["function"]["parameters"]["required"] == Value{"a", "b", "op"});
  // The second request carries the assistant's tool call and the tool's answer.
  Value msgs = reqs[1]["body"]["messages"];
  REQUIRE(msgs.size() == 4);
  CHECK(msgs[2]["role"] == "assistant");
  CHECK(msgs[2]["tool_calls"][0]["id"] == "call_calc_1");
  CHECK(msgs[3] == Value{{"role", "tool"}, {"content", "42"}, {"tool_call_id", "call_calc_1"}});

  // Memory: question, tool call, tool result, answer.
  auto memory = r.memory();
  REQUIRE(memory.size() == 4);
  CHECK(memory[2].role == "tool");
  CHECK(r.call("usage")["calls"] == 2);
}

TEST_CASE("ReActAgent stops at max_iters with a clear final message", "[dialog][react]") {
  const std::string key = unique_key("react");
  // "tools" asks for get_weather, which this agent does not have, every time.
  Served s(openai_config("loop", key, "tools"));
  auto r =
      s.client.create_agent("ReActAgent", "Looper", Value{{"model_config_name", "loop"}, {"max_iters", 3}});
  Msg answer = r.reply(Msg("user", "weather?", "user")).get();
  CHECK_THAT(answer.text(), Contains("max_iters = 3") && Contains("without a final answer"));
  CHECK(answer.metadata["stopped"] == "max_iters");
  CHECK(answer.metadata["iterations"] == 3);
  REQUIRE(answer.metadata["tool_results"].size() == 3);
  CHECK_THAT(answer.metadata["tool_results"][0]["result"].get<std::string>(),
             Contains("no tool named 'get_weather'") && Contains("calculator"));
  CHECK(fake_model_server().requests(key).size() == 3);
  // The unknown tool's error went back to the model as the tool result.
  Value last = request_messages(key, 2);
  CHECK(last.back()["role"] == "tool");
  CHECK_THAT(last.back()["content"].get<std::string>(), Contains("no tool named"));
}

TEST_CASE("ReActAgent args choose the built-in tools and are checked", "[dialog][react]") {
  Served s("");
  auto only_calc = s.client.create_agent("ReActAgent", "C", Value{{"tools", Value::array({"calculator"})}});
  Value tools = only_calc.call("tools");
  REQUIRE(tools.size() == 1);
  CHECK(tools[0]["function"]["name"] == "calculator");
  // With the echo model (no tool calls) the answer comes at once.
  Msg m = only_calc.reply(Msg("user", "plain", "user")).get();
  CHECK(m.content == "plain");
  CHECK(m.metadata["iterations"] == 1);

  auto unknown = error_of([&] {
    s.client.create_agent("ReActAgent", "U", Value{{"tools", Value::array({"shell"})}});
  });
  CHECK(unknown.code() == ErrorCode::bad_args);
  CHECK_THAT(unknown.message(), Contains("'shell'") && Contains("calculator, current_time, echo"));
  auto iters = error_of([&] { s.client.create_agent("ReActAgent", "I", Value{{"max_iters", 0}}); });
  CHECK(iters.code() == ErrorCode::bad_args);
  CHECK_THAT(iters.message(), Contains("max_iters"));
}

TEST_CASE("dialog_demo: two agents on two servers talk until the round limit", "[dialog][demo]") {
  TempDir dir;
  const std::string err = dir.path() + "/stderr";
  std::string cmd = std::string(AGENTD_DIALOG_DEMO) + " --rounds 2 --message 'hello Alice' 2>" + err;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int status = ::pclose(p);
  std::ifstream err_file(err);
  const std::string err_text((std::istreambuf_iterator<char>(err_file)), std::istreambuf_iterator<char>());
  INFO("stdout:\n" << out << "\nstderr:\n" << err_text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(out, Contains("user: hello Alice\nAlice: hello Alice\nBob: hello Alice\n"
                           "Alice: hello Alice\nBob: hello Alice\n"));
  CHECK_THAT(out, Contains("Round limit reached after 2 rounds"));
  CHECK_THAT(out, Contains("Alice: 2 model calls"));

  // The loop's own condition: echo repeats "exit", so Bob says it after the first round.
  p = ::popen((std::string(AGENTD_DIALOG_DEMO) + " --rounds 5 --message exit 2>/dev/null").c_str(), "r");
  REQUIRE(p != nullptr);
  out.clear();
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  status = ::pclose(p);
  INFO(out);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK_THAT(out, Contains("Bob: exit\n") && Contains("Bob said exit after 1 round."));
}

TEST_CASE("DialogAgent streams the model's answer over real HTTP as chunks", "[dialog][streaming]") {
  const std::string key = unique_key("dialog-stream");
  // The fake endpoint sends the first word, then waits 2 s before the rest.
  Served s(openai_config("fake", key, "slowstream-2000"));
  auto alice = s.client.create_agent("DialogAgent", "Alice", Value{{"model_config_name", "fake"}});

  auto p = alice.reply_stream(Msg("user", "one two three", "user"));
  auto first = p.next_chunk();
  REQUIRE(first.has_value());
  CHECK(*first == "echo: ");
  // The first chunk came while the model was still answering: the reply is not there yet.
  CHECK(error_of([&] { p.get(std::chrono::milliseconds(0)); }).code() == ErrorCode::timeout);
  std::string joined = *first;
  for (const auto& chunk : p.chunks()) joined += chunk;
  CHECK(joined == "echo: one two three");
  Msg whole = p.get();
  CHECK(whole.content == "echo: one two three");
  CHECK(whole.name == "Alice");
  CHECK(alice.memory().back().content == "echo: one two three");

  // Only a streamed call asks the model for a stream.
  CHECK(alice.reply(Msg("user", "plain", "user")).get().content == "echo: plain");
  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0]["body"].value("stream", false) == true);
  CHECK(reqs[1]["body"].value("stream", false) == false);
}

TEST_CASE("a model failing mid-stream fails the streamed reply after its chunks", "[dialog][streaming]") {
  const std::string key = unique_key("dialog-stream");
  Served s(openai_config("fake", key, "errorinstream"));
  auto a = s.client.create_agent("DialogAgent", "A", Value{{"model_config_name", "fake"}}, "streamer-1");
  auto p = a.reply_stream(Msg("user", "hi", "user"));
  auto first = p.next_chunk();
  REQUIRE(first.has_value());
  CHECK(*first == "partial ");
  auto e = error_of([&] { p.next_chunk(); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK(e.agent_id() == "streamer-1");
  CHECK_THAT(e.message(), Contains("overloaded mid-stream"));
  CHECK(error_of([&] { p.get(); }).code() == ErrorCode::model_error);
}

TEST_CASE("a model answer nested 20,000 deep fails its call, not the server", "[dialog]") {
  const std::string key = unique_key("deep");
  Served s(openai_config("deep", key, "deeptools-20000") + openai_config("fine", key, "deeptools-40"));
  auto deep = s.client.create_agent("DialogAgent", "Deep", Value{{"model_config_name", "deep"}});
  auto fine = s.client.create_agent("DialogAgent", "Fine", Value{{"model_config_name", "fine"}});
  auto echo = s.client.create_agent("EchoAgent", "Steady");
  // Issued together, on one connection.
  auto refused = deep.reply(Msg("user", "hi", "user"));
  auto forty = fine.reply(Msg("user", "hi", "user"));
  auto beside = echo.reply(Msg("user", "beside", "user"));

  auto e = error_of([&] { refused.get(std::chrono::seconds(20)); });
  CHECK(e.code() == agentd::ErrorCode::model_error);
  CHECK_THAT(e.message(), Contains("nested deeper than 64 levels"));
  // 40 levels of tool_calls, copied verbatim into the reply's metadata, arrive whole.
  Msg ok = forty.get(std::chrono::seconds(20));
  int depth = 0;
  const Value* at = &ok.metadata["tool_calls"];
  while (at->is_array()) {
    ++depth;
    if (at->empty()) break;
    at = &(*at)[0];
  }
  CHECK(depth == 40);
  CHECK(beside.get(std::chrono::seconds(20)).content == "beside");
  // The server lives on.
  CHECK(s.client.list_agents().size() == 3);
  CHECK(error_of([&] { deep.reply(Msg("user", "again", "user")).get(std::chrono::seconds(20)); }).code() ==
        agentd::ErrorCode::model_error);
}
