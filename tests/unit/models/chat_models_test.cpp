// The model clients over real HTTP, against fake_model_server.py (a child process on loopback).
#include "fake_model_server.h"
#include "model_test_support.h"
#include "chat_models.h"
#include "model_config.h"
#include "model_registry.h"
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <string>
#include <vector>

using agentd::ChatModel;
using agentd::ChatOptions;
using agentd::ChatResponse;
using namespace agentd::test;
using agentd::test::fake_model_server;
using agentd::test::unique_key;

namespace {

using Clock = std::chrono::steady_clock;

// An openai_chat model at scenario `scenario` under `key`, with small retry delays; `client`
// overrides client_args (written as a JSON flow mapping, which YAML reads as is).
std::shared_ptr<ChatModel> openai(const std::string& key, const std::string& scenario,
                                  const std::string& extra = "", const Value& client = Value::object()) {
  Value args = {{"base_url", fake_model_server().base(key, scenario) + "/v1"},
                {"timeout", 5},
                {"max_retries", 2},
                {"retry_initial_delay", 0.05}};
  for (auto& [k, v] : client.items()) args[k] = v;
  return model_from_yaml(
      "- config_name: gpt\n  model_type: openai_chat\n  model_name: test-model\n"
      "  api_key: sk-secret-key-123\n" +
      extra + "  client_args: " + args.dump() + "\n");
}

double seconds_between(const Value& a, const Value& b) { return b["t"].get<double>() - a["t"].get<double>(); }

}  // namespace

// --- openai_chat ----------------------------------------------------------------------------

TEST_CASE("openai_chat: a completion, with generate_args merged and the key sent", "[models][openai]") {
  auto key = unique_key("ok");
  auto model =
      openai(key, "ok", "  organization: org-7\n  generate_args: {temperature: 0.5, max_tokens: 50}\n",
             {{"default_headers", {{"X-Team", "agents"}}}});
  ChatOptions options;
  options.generate_args = {{"max_tokens", 20}, {"seed", 1}};
  ChatResponse r = model->chat(conversation(), options);

  CHECK(r.msg.content == "echo: hello there model");
  CHECK(r.msg.role == "assistant");
  CHECK(r.usage.prompt_tokens == 7);
  CHECK(r.usage.completion_tokens == 4);
  CHECK(r.usage.total_tokens == 11);
  CHECK(r.msg.metadata["finish_reason"] == "stop");
  CHECK(r.msg.metadata["usage"]["total_tokens"] == 11);
  CHECK_FALSE(r.msg.metadata.contains("tool_calls"));

  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() == 1);
  const Value& body = reqs[0]["body"];
  CHECK(reqs[0]["path"] == "/s/" + key + "/ok/v1/chat/completions");
  CHECK(body["model"] == "test-model");
  CHECK(body["temperature"] == 0.5);
  CHECK(body["max_tokens"] == 20);  // the call's generate_args win
  CHECK(body["seed"] == 1);
  CHECK_FALSE(body.contains("stream"));
  CHECK(body["messages"] == Value::parse(R"([{"role":"system","content":"You are a test."},
                                            {"role":"user","content":"hello there model"}])"));
  CHECK(reqs[0]["headers"]["authorization"] == "Bearer sk-secret-key-123");
  CHECK(reqs[0]["headers"]["openai-organization"] == "org-7");
  CHECK(reqs[0]["headers"]["x-team"] == "agents");
}

TEST_CASE("openai_chat: streaming delivers chunks as SSE and the usage chunk", "[models][openai]") {
  auto key = unique_key("stream");
  auto model = openai(key, "ok");
  std::vector<std::string> chunks;
  ChatResponse r =
      model->stream(conversation("one two three four"), [&](std::string_view c) { chunks.emplace_back(c); });
  CHECK(r.msg.content == "echo: one two three four");
  REQUIRE(chunks.size() == 5);
  CHECK(chunks[0] == "echo: ");
  std::string joined;
  for (auto& c : chunks) joined += c;
  CHECK(joined == r.msg.text());
  CHECK(r.usage.completion_tokens == 5);
  CHECK(r.msg.metadata["finish_reason"] == "stop");

  Value body = fake_model_server().requests(key)[0]["body"];
  CHECK(body["stream"] == true);
  CHECK(body["stream_options"]["include_usage"] == true);
}

TEST_CASE("openai_chat: stream: true in the config makes chat() stream", "[models][openai]") {
  auto key = unique_key("cfgstream");
  auto model = openai(key, "ok", "  stream: true\n");
  ChatResponse r = model->chat(conversation());
  CHECK(r.msg.content == "echo: hello there model");
  CHECK(fake_model_server().requests(key)[0]["body"]["stream"] == true);
}

TEST_CASE("openai_chat: tool calls land in metadata[\"tool_calls\"]", "[models][openai][tools]") {
  auto key = unique_key("tools");
  auto model = openai(key, "tools");
  ChatOptions options;
  options.tools = Value::parse(R"([{"type":"function","function":{"name":"get_weather",
      "description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  ChatResponse r = model->chat(conversation("weather in Paris?"), options);
  CHECK(r.msg.content == "");
  CHECK(r.msg.metadata["finish_reason"] == "tool_calls");
  REQUIRE(r.msg.metadata["tool_calls"].size() == 1);
  const Value& call = r.msg.metadata["tool_calls"][0];
  CHECK(call["id"] == "call_1");
  CHECK(call["function"]["name"] == "get_weather");
  CHECK(Value::parse(call["function"]["arguments"].get<std::string>()) == Value{{"city", "Paris"}});
  CHECK(fake_model_server().requests(key)[0]["body"]["tools"] == options.tools);
}

TEST_CASE("openai_chat: streamed tool-call deltas are put back together", "[models][openai][tools]") {
  auto key = unique_key("toolstream");
  auto model = openai(key, "tools");
  ChatResponse r = model->stream(conversation(), [](std::string_view) {});
  REQUIRE(r.msg.metadata["tool_calls"].size() == 1);
  const Value& call = r.msg.metadata["tool_calls"][0];
  CHECK(call["id"] == "call_1");
  CHECK(call["type"] == "function");
  CHECK(call["function"]["name"] == "get_weather");
  CHECK(call["function"]["arguments"] == "{\"city\": \"Paris\"}");
}

TEST_CASE("openai_chat: tool calls and tool results go back to the endpoint", "[models][openai][tools]") {
  auto key = unique_key("toolround");
  auto model = openai(key, "ok");
  Value calls = Value::parse(
      R"([{"id":"call_9","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}])");
  Msg assistant("assistant", Value(""), "assistant");
  assistant.metadata = {{"tool_calls", calls}};
  Msg result("get_weather", Value("-3 C"), "tool");
  result.metadata = {{"tool_call_id", "call_9"}};
  model->chat({Msg("user", Value("weather in Oslo?"), "user"), assistant, result});

  Value messages = fake_model_server().requests(key)[0]["body"]["messages"];
  REQUIRE(messages.size() == 3);
  CHECK(messages[1]["role"] == "assistant");
  CHECK(messages[1]["content"].is_null());
  CHECK(messages[1]["tool_calls"] == calls);
  CHECK(messages[2] == Value{{"role", "tool"}, {"content", "-3 C"}, {"tool_call_id", "call_9"}});
}

TEST_CASE("openai_chat: 429 waits what Retry-After asks, then succeeds", "[models][openai][retry]") {
  auto key = unique_key("ra");
  // Backoff alone would wait 5 s or more: finishing in about 1 s proves Retry-After was used.
  auto model = openai(key, "ratelimit-1-1", "", {{"retry_initial_delay", 10}});
  auto start = Clock::now();
  ChatResponse r = model->chat(conversation());
  auto took = Clock::now() - start;
  CHECK(r.msg.content == "echo: hello there model");
  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() == 2);
  CHECK(seconds_between(reqs[0], reqs[1]) >= 0.95);
  CHECK(took < 4s);
}

TEST_CASE("openai_chat: 429 honours retry-after-ms", "[models][openai][retry]") {
  auto key = unique_key("rams");
  auto model = openai(key, "ratelimitms-2-300", "", {{"retry_initial_delay", 10}});
  ChatResponse r = model->chat(conversation());
  CHECK(r.msg.content == "echo: hello there model");
  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() == 3);
  CHECK(seconds_between(reqs[0], reqs[1]) >= 0.28);
  CHECK(seconds_between(reqs[0], reqs[1]) < 3.0);
  CHECK(seconds_between(reqs[1], reqs[2]) >= 0.28);
}

TEST_CASE("openai_chat: a Retry-After beyond retry_max_delay fails at once", "[models][openai][retry]") {
  auto key = unique_key("ralong");
  auto model = openai(key, "ratelimit-5-120", "", {{"retry_max_delay", 2}});
  Error e = error_from([&] { model->chat(conversation()); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK(e.retryable());
  CHECK_THAT(e.message(),
             Contains("HTTP 429") && Contains("rate limited, slow down") && Contains("120000 ms"));
  CHECK(fake_model_server().requests(key).size() == 1);
}

TEST_CASE("openai_chat: 500s are retried with backoff, then reported", "[models][openai][retry]") {
  auto key = unique_key("f500");
  auto model = openai(key, "fail-500-0", "", {{"retry_initial_delay", 0.2}});
  Error e = error_from([&] { model->chat(conversation()); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("model 'gpt'") && Contains("HTTP 500") &&
                              Contains("server says status 500") && Contains("after 3 attempts"));
  CHECK_THAT(e.message(), !Contains("sk-secret-key-123"));
  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() == 3);                        // 1 + max_retries
  CHECK(seconds_between(reqs[0], reqs[1]) >= 0.1);  // first wait in [0.1, 0.2] s
  CHECK(seconds_between(reqs[1], reqs[2]) >= 0.2);  // second in [0.2, 0.4] s
}

TEST_CASE("openai_chat: a 503 then success is invisible to the caller", "[models][openai][retry]") {
  auto key = unique_key("f503");
  auto model = openai(key, "fail-503-1");
  CHECK(model->chat(conversation()).msg.content == "echo: hello there model");
  CHECK(fake_model_server().requests(key).size() == 2);
}

TEST_CASE("openai_chat: other 4xx are not retried", "[models][openai][retry]") {
  auto key = unique_key("f400");
  auto model = openai(key, "fail-400-0");
  Error e = error_from([&] { model->chat(conversation()); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK_FALSE(e.retryable());
  CHECK_THAT(e.message(),
             Contains("model 'gpt'") && Contains("HTTP 400") && Contains("server says status 400"));
  CHECK(fake_model_server().requests(key).size() == 1);
}

TEST_CASE("openai_chat: the API key never appears in an error", "[models][openai]") {
  auto key = unique_key("keyecho");
  auto model = openai(key, "keyecho");
  Error e = error_from([&] { model->chat(conversation()); });
  CHECK_THAT(e.message(), Contains("HTTP 401") && Contains("Incorrect API key provided: ***"));
  CHECK_THAT(e.message(), !Contains("sk-secret-key-123"));
  CHECK_THAT(std::string(e.what()), !Contains("sk-secret-key-123"));
}

TEST_CASE("openai_chat: garbage instead of JSON is a model_error", "[models][openai]") {
  auto key = unique_key("garbage");
  auto model = openai(key, "garbage");
  Error e = error_from([&] { model->chat(conversation()); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK_THAT(e.message(), Contains("invalid JSON") && Contains("this is not json"));
  CHECK(fake_model_server().requests(key).size() == 1);
}

TEST_CASE("openai_chat: a garbage stream event is a model_error", "[models][openai][stream]") {
  auto key = unique_key("garbagestream");
  auto model = openai(key, "garbagestream");
  std::string got;
  Error e = error_from([&] { model->stream(conversation(), [&](std::string_view c) { got += c; }); });
  CHECK_THAT(e.message(), Contains("invalid JSON in a stream event"));
  CHECK(got == "echo: ");  // what came before the bad event was delivered
}

TEST_CASE("openai_chat: a stream that ends before [DONE] is an error", "[models][openai][stream]") {
  auto key = unique_key("truncated");
  auto model = openai(key, "truncated");
  std::string got;
  Error e =
      error_from([&] { model->stream(conversation("a b c d"), [&](std::string_view c) { got += c; }); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("ended before it was complete"));
  CHECK(got == "echo: a ");
}

TEST_CASE("openai_chat: a connection dropped mid-stream is an error, not a silent retry",
          "[models][openai][stream]") {
  auto key = unique_key("cut");
  auto model = openai(key, "cut-2");
  std::string got;
  Error e =
      error_from([&] { model->stream(conversation("a b c d"), [&](std::string_view c) { got += c; }); });
  CHECK_THAT(e.message(), Contains("broke off"));
  CHECK(got == "echo: a ");
  CHECK(fake_model_server().requests(key).size() == 1);  // chunks were delivered: no retry
}

TEST_CASE("openai_chat: an error event inside a stream is reported", "[models][openai][stream]") {
  auto key = unique_key("errstream");
  auto model = openai(key, "errorinstream");
  Error e = error_from([&] { model->stream(conversation(), [](std::string_view) {}); });
  CHECK_THAT(e.message(), Contains("the model is overloaded mid-stream"));
}

TEST_CASE("openai_chat: a slow endpoint times out, is retried, then reported", "[models][openai][timeout]") {
  auto key = unique_key("slow");
  auto model = model_from_yaml(
      "- config_name: slowpoke\n  model_type: openai_chat\n  model_name: m\n"
      "  client_args:\n    base_url: " +
      fake_model_server().base(key, "slow-3000") +
      "/v1\n    timeout: 0.3\n    max_retries: 1\n    retry_initial_delay: 0.01\n");
  auto start = Clock::now();
  Error e = error_from([&] { model->chat(conversation()); });
  CHECK(Clock::now() - start < 2500ms);
  CHECK(e.code() == ErrorCode::model_error);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("model 'slowpoke'") && Contains("timed out after 300 ms") &&
                              Contains("after 2 attempts"));
  CHECK(fake_model_server().requests(key).size() == 2);
}

TEST_CASE("openai_chat: a per-call timeout overrides the config's", "[models][openai][timeout]") {
  auto key = unique_key("slowok");
  auto model = openai(key, "slow-400", "", {{"max_retries", 0}});
  CHECK(model->chat(conversation()).msg.content == "echo: hello there model");  // 5 s config timeout
  ChatOptions quick;
  quick.timeout = 100ms;
  Error e = error_from([&] { model->chat(conversation(), quick); });
  CHECK_THAT(e.message(), Contains("timed out after 100 ms"));
}

TEST_CASE("openai_chat: a stalled stream hits the idle timeout", "[models][openai][timeout][stream]") {
  auto key = unique_key("slowstream");
  auto model = model_from_yaml(
      "- config_name: g\n  model_type: openai_chat\n  model_name: m\n"
      "  client_args:\n    base_url: " +
      fake_model_server().base(key, "slowstream-4000") + "/v1\n    timeout: 0.3\n    max_retries: 3\n");
  std::string got;
  auto start = Clock::now();
  Error e = error_from([&] { model->stream(conversation(), [&](std::string_view c) { got += c; }); });
  CHECK(Clock::now() - start < 3s);
  CHECK_THAT(e.message(), Contains("broke off") && Contains("no data for 300 ms"));
  CHECK(got == "echo: ");
  CHECK(fake_model_server().requests(key).size() == 1);
}

TEST_CASE("openai_chat: a refused connection is retried, then reported", "[models][openai][retry]") {
  int port = agentd::test::closed_port();
  auto model = model_from_yaml(
      "- config_name: nowhere\n  model_type: openai_chat\n  model_name: m\n"
      "  client_args:\n    base_url: http://127.0.0.1:" +
      std::to_string(port) + "/v1\n    max_retries: 2\n    retry_initial_delay: 0.01\n");
  Error e = error_from([&] { model->chat(conversation()); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("model 'nowhere'") && Contains("127.0.0.1:" + std::to_string(port)) &&
                              Contains("after 3 attempts"));
}

TEST_CASE("openai_chat: one model serves many threads at once", "[models][openai][threads]") {
  auto key = unique_key("threads");
  auto model = openai(key, "ok");
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        std::string text = "t" + std::to_string(t) + " call " + std::to_string(i);
        bool streamed = i % 2 == 1;
        ChatResponse r = streamed ? model->stream(conversation(text), [](std::string_view) {})
                                  : model->chat(conversation(text));
        if (r.msg.content == "echo: " + text) right.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(right.load() == 20);
  CHECK(fake_model_server().requests(key).size() == 20);
}

// --- ollama_chat ----------------------------------------------------------------------------

std::shared_ptr<ChatModel> ollama(const std::string& key, const std::string& scenario,
                                  const std::string& extra = "") {
  return model_from_yaml("- config_name: llama\n  model_type: ollama_chat\n  model_name: llama3\n  host: " +
                         fake_model_server().base(key, scenario) +
                         "\n  options: {num_ctx: 2048}\n  keep_alive: 1m\n" + extra +
                         "  client_args: {max_retries: 1, retry_initial_delay: 0.01, timeout: 5}\n");
}

TEST_CASE("ollama_chat: a completion over /api/chat with options", "[models][ollama]") {
  auto key = unique_key("ollama");
  auto model = ollama(key, "ok", "  generate_args: {temperature: 0.1, format: json}\n");
  ChatResponse r = model->chat(conversation());
  CHECK(r.msg.content == "echo: hello there model");
  CHECK(r.usage.prompt_tokens == 7);
  CHECK(r.usage.completion_tokens == 4);
  Value req = fake_model_server().requests(key)[0];
  CHECK(req["path"] == "/s/" + key + "/ok/api/chat");
  CHECK(req["body"]["stream"] == false);
  CHECK(req["body"]["options"] == Value{{"num_ctx", 2048}, {"temperature", 0.1}});
  CHECK(req["body"]["format"] == "json");
  CHECK(req["body"]["keep_alive"] == "1m");
  CHECK(req["body"]["messages"][1] == Value{{"role", "user"}, {"content", "hello there model"}});
}

TEST_CASE("ollama_chat: streaming newline-delimited JSON", "[models][ollama][stream]") {
  auto key = unique_key("ollamastream");
  auto model = ollama(key, "ok");
  std::vector<std::string> chunks;
  ChatResponse r = model->stream(conversation("x y"), [&](std::string_view c) { chunks.emplace_back(c); });
  CHECK(r.msg.content == "echo: x y");
  CHECK(chunks == std::vector<std::string>{"echo: ", "x ", "y"});
  CHECK(r.usage.completion_tokens == 3);
}

TEST_CASE("ollama_chat: a stream without done is an error", "[models][ollama][stream]") {
  auto key = unique_key("ollamatrunc");
  auto model = ollama(key, "truncated");
  Error e = error_from([&] { model->stream(conversation("a b c"), [](std::string_view) {}); });
  CHECK_THAT(e.message(), Contains("model 'llama'") && Contains("ended before it was complete"));
}

TEST_CASE("ollama_chat: tool calls are given in OpenAI's shape", "[models][ollama][tools]") {
  auto key = unique_key("ollamatools");
  auto model = ollama(key, "tools");
  ChatResponse r = model->chat(conversation());
  REQUIRE(r.msg.metadata["tool_calls"].size() == 1);
  CHECK(r.msg.metadata["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK(Value::parse(r.msg.metadata["tool_calls"][0]["function"]["arguments"].get<std::string>()) ==
        Value{{"city", "Paris"}});
}

TEST_CASE("ollama_chat: the endpoint's error message is reported", "[models][ollama]") {
  auto key = unique_key("ollama404");
  auto model = ollama(key, "fail-404-0");
  Error e = error_from([&] { model->chat(conversation()); });
  CHECK_THAT(e.message(), Contains("HTTP 404") && Contains("ollama says status 404"));
  CHECK(fake_model_server().requests(key).size() == 1);
}

// --- dashscope_chat -------------------------------------------------------------------------

std::shared_ptr<ChatModel> dashscope(const std::string& key, const std::string& scenario) {
  return model_from_yaml(
      "- config_name: qwen\n  model_type: dashscope_chat\n  model_name: qwen-max\n"
      "  api_key: ds-key-456789\n  generate_args: {temperature: 0.3}\n"
      "  client_args:\n    base_url: " +
      fake_model_server().base(key, scenario) +
      "/api/v1\n    max_retries: 1\n    retry_initial_delay: 0.01\n");
}

TEST_CASE("dashscope_chat: a completion over the native API", "[models][dashscope]") {
  auto key = unique_key("ds");
  ChatResponse r = dashscope(key, "ok")->chat(conversation());
  CHECK(r.msg.content == "echo: hello there model");
  CHECK(r.usage.prompt_tokens == 5);
  CHECK(r.usage.completion_tokens == 4);
  Value req = fake_model_server().requests(key)[0];
  CHECK(req["body"]["model"] == "qwen-max");
  CHECK(req["body"]["input"]["messages"].size() == 2);
  CHECK(req["body"]["parameters"]["result_format"] == "message");
  CHECK(req["body"]["parameters"]["temperature"] == 0.3);
  CHECK(req["headers"]["authorization"] == "Bearer ds-key-456789");
}

TEST_CASE("dashscope_chat: streaming with X-DashScope-SSE", "[models][dashscope][stream]") {
  auto key = unique_key("dsstream");
  std::vector<std::string> chunks;
  ChatResponse r =
      dashscope(key, "ok")->stream(conversation("p q"), [&](std::string_view c) { chunks.emplace_back(c); });
  CHECK(r.msg.content == "echo: p q");
  CHECK(chunks == std::vector<std::string>{"echo: ", "p ", "q"});
  CHECK(r.msg.metadata["finish_reason"] == "stop");
  Value req = fake_model_server().requests(key)[0];
  CHECK(req["headers"]["x-dashscope-sse"] == "enable");
  CHECK(req["body"]["parameters"]["incremental_output"] == true);
}

TEST_CASE("dashscope_chat: a stream cut before finish_reason is an error", "[models][dashscope][stream]") {
  auto key = unique_key("dstrunc");
  Error e = error_from(
      [&] { dashscope(key, "truncated")->stream(conversation("a b c"), [](std::string_view) {}); });
  CHECK_THAT(e.message(), Contains("ended before it was complete"));
}

TEST_CASE("dashscope_chat: DashScope's error code and message are reported", "[models][dashscope]") {
  auto key = unique_key("ds429");
  Error e = error_from([&] { dashscope(key, "fail-429-0")->chat(conversation()); });
  CHECK_THAT(e.message(), Contains("HTTP 429") && Contains("Throttling: dashscope says status 429"));
  CHECK_THAT(e.message(), !Contains("ds-key-456789"));
  CHECK(fake_model_server().requests(key).size() == 2);
}

// --- post_api_chat --------------------------------------------------------------------------

TEST_CASE("post_api_chat: AgentScope's request and response forms", "[models][post_api]") {
  auto key = unique_key("post");
  auto model = model_from_yaml(
      "- config_name: p\n  model_type: post_api_chat\n  api_url: " + fake_model_server().base(key, "ok") +
      "/post\n  headers: {X-Api-Token: tok}\n  json_args: {model: m1, temperature: 0}\n"
      "  max_retries: 1\n");
  ChatResponse r = model->chat(conversation());
  CHECK(r.msg.content == "echo: hello there model");
  Value req = fake_model_server().requests(key)[0];
  CHECK(req["headers"]["x-api-token"] == "tok");
  CHECK(req["body"]["model"] == "m1");
  CHECK(req["body"]["temperature"] == 0);
  CHECK(req["body"]["inputs"].size() == 2);  // AgentScope's default messages_key
}

TEST_CASE("post_api_chat: response_path and OpenAI-shaped answers", "[models][post_api]") {
  auto custom_key = unique_key("postcustom");
  auto custom = model_from_yaml("- config_name: p\n  model_type: post_api_chat\n  api_url: " +
                                fake_model_server().base(custom_key, "custom") +
                                "/post\n  messages_key: messages\n  response_path: result.text\n");
  CHECK(custom->chat(conversation()).msg.content == "echo: hello there model");
  CHECK(fake_model_server().requests(custom_key)[0]["body"].contains("messages"));

  auto openai_key = unique_key("postopenai");
  auto shaped = model_from_yaml("- config_name: p\n  model_type: post_api_chat\n  api_url: " +
                                fake_model_server().base(openai_key, "openai") + "/post\n");
  std::string streamed;
  ChatResponse r = shaped->stream(conversation(), [&](std::string_view c) { streamed += c; });
  CHECK(r.msg.content == "echo: hello there model");
  CHECK(streamed == "echo: hello there model");  // no streaming: one chunk
  CHECK(r.usage.total_tokens == 5);

  auto wrong = model_from_yaml("- config_name: p\n  model_type: post_api_chat\n  api_url: " +
                               fake_model_server().base(unique_key("postwrong"), "custom") +
                               "/post\n  response_path: result.missing\n");
  Error e = error_from([&] { wrong->chat(conversation()); });
  CHECK_THAT(e.message(), Contains("nothing at response_path 'result.missing'"));
}

// --- echo -----------------------------------------------------------------------------------

TEST_CASE("echo: answers with the last user message and counts words", "[models][echo]") {
  auto model = model_from_yaml("- config_name: e\n  model_type: echo\n");
  std::vector<Msg> msgs = {Msg("system", Value("be brief"), "system"),
                           Msg("user", Value("hello big world"), "user"),
                           Msg("bot", Value("ignored reply"), "assistant")};
  ChatResponse r = model->chat(msgs);
  CHECK(r.msg.content == "hello big world");
  CHECK(r.msg.role == "assistant");
  CHECK(r.usage.prompt_tokens == 7);
  CHECK(r.usage.completion_tokens == 3);
  CHECK(r.usage.total_tokens == 10);
  std::vector<std::string> chunks;
  ChatResponse s = model->stream(msgs, [&](std::string_view c) { chunks.emplace_back(c); });
  CHECK(chunks == std::vector<std::string>{"hello ", "big ", "world"});
  CHECK(s.msg.content == "hello big world");
  CHECK(model->chat({}).msg.content == "");
}

// --- building blocks ------------------------------------------------------------------------

TEST_CASE("SseDecoder: events split anywhere, CRLF, comments, multi-line data", "[models][http]") {
  std::vector<std::pair<std::string, std::string>> events;
  agentd::detail::SseDecoder sse([&](std::string_view e, std::string_view d) { events.emplace_back(e, d); });
  std::string stream = ": keep-alive\r\ndata: {\"a\":1}\r\n\r\nevent: result\ndata:x\ndata: y\n\ndata: tail";
  for (char c : stream) sse.feed(std::string_view(&c, 1));
  REQUIRE(events.size() == 2);
  CHECK(events[0] == std::pair<std::string, std::string>{"", "{\"a\":1}"});
  CHECK(events[1] == std::pair<std::string, std::string>{"result", "x\ny"});
  sse.finish();
  REQUIRE(events.size() == 3);
  CHECK(events[2].second == "tail");
}

TEST_CASE("backoff_delay doubles, jitters within [d/2, d] and is capped", "[models][http]") {
  agentd::detail::RetryPolicy p{5, 100ms, 1000ms};
  for (int i = 0; i < 50; ++i) {
    auto d0 = agentd::detail::backoff_delay(p, 0);
    auto d3 = agentd::detail::backoff_delay(p, 3);
    auto d9 = agentd::detail::backoff_delay(p, 9);
    CHECK((d0 >= 50ms && d0 <= 100ms));
    CHECK((d3 >= 400ms && d3 <= 800ms));
    CHECK((d9 >= 500ms && d9 <= 1000ms));
  }
}

TEST_CASE("endpoint_error_message reads the common error shapes", "[models][http]") {
  using agentd::detail::endpoint_error_message;
  CHECK(endpoint_error_message(R"({"error":{"message":"bad key","type":"x"}})") == "bad key");
  CHECK(endpoint_error_message(R"({"error":"model not found"})") == "model not found");
  CHECK(endpoint_error_message(R"({"code":"Throttling","message":"slow down"})") == "Throttling: slow down");
  CHECK(endpoint_error_message(R"({"detail":"Not Found"})") == "Not Found");
  CHECK(endpoint_error_message("  <html>Bad Gateway</html>\n") == "<html>Bad Gateway</html>");
  CHECK(endpoint_error_message("") == "(empty body)");
}
