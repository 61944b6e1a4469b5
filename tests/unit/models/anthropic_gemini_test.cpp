// anthropic_chat and gemini_chat over real HTTP, against fake_model_server.py.
#include "fake_model_server.h"
#include "model_test_support.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

using agentd::ChatModel;
using agentd::ChatOptions;
using agentd::ChatResponse;
using namespace agentd::test;

namespace {

const Value kWeatherTool = Value::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");

std::shared_ptr<ChatModel> anthropic(const std::string& key, const std::string& scenario,
                                     const std::string& extra = "") {
  return model_from_yaml(
      "- config_name: claude\n  model_type: anthropic_chat\n  model_name: claude-3-opus\n"
      "  api_key: sk-ant-secret-99\n" +
      extra + "  client_args:\n    base_url: " + fake_model_server().base(key, scenario) +
      "\n    timeout: 5\n    max_retries: 2\n    retry_initial_delay: 0.02\n");
}

std::shared_ptr<ChatModel> gemini(const std::string& key, const std::string& scenario,
                                  const std::string& extra = "") {
  return model_from_yaml(
      "- config_name: gem\n  model_type: gemini_chat\n  model_name: gemini-pro\n"
      "  api_key: goog-secret-77\n" +
      extra + "  client_args:\n    base_url: " + fake_model_server().base(key, scenario) +
      "/v1beta\n    timeout: 5\n    max_retries: 2\n    retry_initial_delay: 0.02\n");
}

std::vector<Msg> tool_round_trip(const std::string& call_id) {
  Msg call("assistant", Value(""), "assistant");
  call.metadata = {{"tool_calls", Value::parse(R"([{"id": ")" + call_id +
                                               R"(", "type": "function", "function": {"name": "get_weather",
                                               "arguments": "{\"city\": \"Paris\"}"}}])")}};
  Msg result("get_weather", Value("sunny"), "tool");
  result.metadata = {{"tool_call_id", call_id}};
  return {Msg("system", Value("Be brief."), "system"), Msg("user", Value("weather?"), "user"), call, result};
}

}  // namespace

// --- anthropic_chat -------------------------------------------------------------------------

TEST_CASE("anthropic_chat: system prompt at the top level, max_tokens, headers, usage",
          "[models][anthropic]") {
  auto key = unique_key("ant");
  auto model = anthropic(key, "ok", "  generate_args: {temperature: 0.2}\n");
  ChatResponse r = model->chat(conversation());
  CHECK(r.msg.content == "echo: hello there model");
  CHECK(r.msg.metadata["finish_reason"] == "end_turn");
  CHECK(r.usage.prompt_tokens == 9);
  CHECK(r.usage.completion_tokens == 4);
  CHECK(r.usage.total_tokens == 13);

  Value req = fake_model_server().requests(key)[0];
  CHECK(req["path"] == "/s/" + key + "/ok/v1/messages");
  CHECK(req["headers"]["x-api-key"] == "sk-ant-secret-99");
  CHECK(req["headers"]["anthropic-version"] == "2023-06-01");
  CHECK_FALSE(req["headers"].contains("authorization"));
  const Value& body = req["body"];
  CHECK(body["model"] == "claude-3-opus");
  CHECK(body["system"] == "You are a test.");
  CHECK(body["max_tokens"] == 4096);
  CHECK(body["temperature"] == 0.2);
  CHECK_FALSE(body.contains("stream"));
  CHECK(body["messages"] == Value::parse(R"([{"role": "user", "content": "hello there model"}])"));

  ChatOptions options;
  options.generate_args = {{"max_tokens", 100}};
  model->chat(conversation(), options);
  CHECK(fake_model_server().requests(key)[1]["body"]["max_tokens"] == 100);
}

TEST_CASE("anthropic_chat: streaming server-sent events", "[models][anthropic][stream]") {
  auto key = unique_key("antstream");
  std::vector<std::string> chunks;
  ChatResponse r =
      anthropic(key, "ok")->stream(conversation("x y"), [&](std::string_view c) { chunks.emplace_back(c); });
  CHECK(r.msg.content == "echo: x y");
  CHECK(chunks == std::vector<std::string>{"echo: ", "x ", "y"});
  CHECK(r.usage.prompt_tokens == 9);
  CHECK(r.usage.completion_tokens == 3);
  CHECK(r.msg.metadata["finish_reason"] == "end_turn");
  CHECK(fake_model_server().requests(key)[0]["body"]["stream"] == true);
}

TEST_CASE("anthropic_chat: tools go out as input_schema, tool_use comes back in OpenAI's shape",
          "[models][anthropic][tools]") {
  auto key = unique_key("anttools");
  ChatOptions options;
  options.tools = kWeatherTool;
  auto model = anthropic(key, "tools");
  for (bool stream : {false, true}) {
    INFO("stream " << stream);
    ChatResponse r = stream ? model->stream(
                                  conversation(), [](std::string_view) {}, options)
                            : model->chat(conversation(), options);
    CHECK(r.msg.content == "Let me check.");
    CHECK(r.msg.metadata["finish_reason"] == "tool_use");
    REQUIRE(r.msg.metadata["tool_calls"].size() == 1);
    const Value& call = r.msg.metadata["tool_calls"][0];
    CHECK(call["id"] == "toolu_1");
    CHECK(call["function"]["name"] == "get_weather");
    CHECK(Value::parse(call["function"]["arguments"].get<std::string>()) == Value{{"city", "Paris"}});
  }
  Value body = fake_model_server().requests(key)[0]["body"];
  CHECK(body["tools"] == Value::parse(R"([{"name": "get_weather", "description": "Weather in a city",
      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])"));
}

TEST_CASE("anthropic_chat: tool calls and results go back as tool_use and tool_result blocks",
          "[models][anthropic][tools]") {
  auto key = unique_key("antback");
  ChatResponse r = anthropic(key, "ok")->chat(tool_round_trip("toolu_9"));
  CHECK(r.msg.content == "echo: sunny");
  Value body = fake_model_server().requests(key)[0]["body"];
  CHECK(body["system"] == "Be brief.");
  CHECK(body["messages"] == Value::parse(R"([
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "get_weather",
                                         "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "sunny"}]}])"));
}

TEST_CASE("anthropic_chat: 529/5xx and 429 are retried, and 4xx is reported with Anthropic's message",
          "[models][anthropic][retry]") {
  auto key = unique_key("ant529");
  CHECK(anthropic(key, "fail-529-2")->chat(conversation()).msg.content == "echo: hello there model");
  CHECK(fake_model_server().requests(key).size() == 3);

  auto key429 = unique_key("ant429");
  CHECK(anthropic(key429, "ratelimitms-1-10")->chat(conversation()).msg.content == "echo: hello there model");
  CHECK(fake_model_server().requests(key429).size() == 2);

  auto key400 = unique_key("ant400");
  Error e = error_from([&] { anthropic(key400, "fail-400-0")->chat(conversation()); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK_FALSE(e.retryable());
  CHECK_THAT(e.message(),
             Contains("model 'claude'") && Contains("HTTP 400") && Contains("anthropic says status 400"));
  CHECK(fake_model_server().requests(key400).size() == 1);
}

TEST_CASE("anthropic_chat: malformed answers are model_errors", "[models][anthropic][stream]") {
  Error garbage = error_from([&] { anthropic(unique_key("antg"), "garbage")->chat(conversation()); });
  CHECK_THAT(garbage.message(), Contains("invalid JSON"));

  std::string got;
  Error cut = error_from([&] {
    anthropic(unique_key("antcut"), "truncated")->stream(conversation("a b c"), [&](std::string_view c) {
      got += c;
    });
  });
  CHECK(cut.retryable());
  CHECK_THAT(cut.message(), Contains("ended before it was complete"));
  CHECK(got == "echo: a ");

  Error inner = error_from([&] {
    anthropic(unique_key("anterr"), "errorinstream")->stream(conversation(), [](std::string_view) {});
  });
  CHECK_THAT(inner.message(), Contains("overloaded mid-stream"));
}

// --- gemini_chat ----------------------------------------------------------------------------

TEST_CASE("gemini_chat: roles user/model, systemInstruction, generationConfig, usage", "[models][gemini]") {
  auto key = unique_key("gem");
  auto model = gemini(key, "ok", "  generate_args: {temperature: 0.4, safetySettings: []}\n");
  std::vector<Msg> msgs = conversation("how are you");
  msgs.insert(msgs.begin() + 1, Msg("assistant", Value("hi"), "assistant"));
  ChatResponse r = model->chat(msgs);
  CHECK(r.msg.content == "echo: how are you");
  CHECK(r.msg.metadata["finish_reason"] == "STOP");
  CHECK(r.usage.prompt_tokens == 6);
  CHECK(r.usage.completion_tokens == 4);
  CHECK(r.usage.total_tokens == 10);

  Value req = fake_model_server().requests(key)[0];
  CHECK(req["path"] == "/s/" + key + "/ok/v1beta/models/gemini-pro:generateContent");
  CHECK(req["headers"]["x-goog-api-key"] == "goog-secret-77");
  CHECK_FALSE(req["headers"].contains("authorization"));
  const Value& body = req["body"];
  CHECK(body["systemInstruction"] == Value::parse(R"({"parts": [{"text": "You are a test."}]})"));
  CHECK(body["contents"] == Value::parse(R"([{"role": "model", "parts": [{"text": "hi"}]},
                                             {"role": "user", "parts": [{"text": "how are you"}]}])"));
  CHECK(body["generationConfig"] == Value{{"temperature", 0.4}});
  CHECK(body["safetySettings"] == Value::array());
}

TEST_CASE("gemini_chat: streamGenerateContent with alt=sse", "[models][gemini][stream]") {
  auto key = unique_key("gemstream");
  std::vector<std::string> chunks;
  ChatResponse r =
      gemini(key, "ok")->stream(conversation("x y"), [&](std::string_view c) { chunks.emplace_back(c); });
  CHECK(r.msg.content == "echo: x y");
  CHECK(chunks == std::vector<std::string>{"echo: ", "x ", "y"});
  CHECK(r.usage.completion_tokens == 3);
  CHECK(fake_model_server().requests(key)[0]["path"] ==
        "/s/" + key + "/ok/v1beta/models/gemini-pro:streamGenerateContent?alt=sse");
}

TEST_CASE("gemini_chat: functionDeclarations out, functionCall back, functionResponse with the name",
          "[models][gemini][tools]") {
  auto key = unique_key("gemtools");
  ChatOptions options;
  options.tools = kWeatherTool;
  auto model = gemini(key, "tools");
  for (bool stream : {false, true}) {
    INFO("stream " << stream);
    ChatResponse r = stream ? model->stream(
                                  conversation(), [](std::string_view) {}, options)
                            : model->chat(conversation(), options);
    REQUIRE(r.msg.metadata["tool_calls"].size() == 1);
    const Value& call = r.msg.metadata["tool_calls"][0];
    CHECK(call["id"] == "call_0");
    CHECK(call["function"]["name"] == "get_weather");
    CHECK(Value::parse(call["function"]["arguments"].get<std::string>()) == Value{{"city", "Paris"}});
  }
  CHECK(fake_model_server().requests(key)[0]["body"]["tools"] ==
        Value::parse(R"([{"functionDeclarations": [{"name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}])"));

  auto back = unique_key("gemback");
  CHECK(gemini(back, "ok")->chat(tool_round_trip("call_0")).msg.content == "echo: sunny");
  CHECK(fake_model_server().requests(back)[0]["body"]["contents"] == Value::parse(R"([
      {"role": "user", "parts": [{"text": "weather?"}]},
      {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
      {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"content": "sunny"}}}]}])"));
}

TEST_CASE("gemini_chat: 5xx and 429 are retried, and errors carry Google's message",
          "[models][gemini][retry]") {
  auto key = unique_key("gem503");
  CHECK(gemini(key, "fail-503-1")->chat(conversation()).msg.content == "echo: hello there model");
  CHECK(fake_model_server().requests(key).size() == 2);

  auto key429 = unique_key("gem429");
  CHECK(gemini(key429, "ratelimitms-2-10")->chat(conversation()).msg.content == "echo: hello there model");
  CHECK(fake_model_server().requests(key429).size() == 3);

  auto key500 = unique_key("gem500");
  Error e = error_from([&] { gemini(key500, "fail-500-0")->chat(conversation()); });
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("model 'gem'") && Contains("HTTP 500") && Contains("after 3 attempts"));
  CHECK_THAT(e.message(), !Contains("goog-secret-77"));
}

TEST_CASE("gemini_chat: malformed or blocked answers are model_errors", "[models][gemini][stream]") {
  CHECK_THAT(error_from([&] { gemini(unique_key("gemg"), "garbage")->chat(conversation()); }).message(),
             Contains("invalid JSON"));
  CHECK_THAT(error_from([&] { gemini(unique_key("gemb"), "blocked")->chat(conversation()); }).message(),
             Contains("blocked") && Contains("SAFETY"));
  std::string got;
  Error bad = error_from([&] {
    gemini(unique_key("gemgs"), "garbagestream")->stream(conversation(), [&](std::string_view c) {
      got += c;
    });
  });
  CHECK_THAT(bad.message(), Contains("invalid JSON in a stream event"));
  CHECK(got == "echo: ");
  Error cut = error_from([&] {
    gemini(unique_key("gemcut"), "truncated")->stream(conversation("a b c"), [](std::string_view) {});
  });
  CHECK(cut.retryable());
  CHECK_THAT(cut.message(), Contains("ended before it was complete"));
}

TEST_CASE("anthropic_chat and gemini_chat: the results of parallel tool calls go back in one turn",
          "[models][anthropic][gemini][tools]") {
  Msg call("assistant", Value(""), "assistant");
  call.metadata = {{"tool_calls", Value::parse(R"([
      {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}])")}};
  Msg r1("get_weather", Value("sunny"), "tool");
  r1.metadata = {{"tool_call_id", "c1"}};
  Msg r2("get_time", Value("noon"), "tool");
  r2.metadata = {{"tool_call_id", "c2"}};
  const std::vector<Msg> msgs = {Msg("user", Value("weather and time?"), "user"), call, r1, r2};

  auto ant = unique_key("antpar");
  anthropic(ant, "ok")->chat(msgs);
  Value ant_msgs = fake_model_server().requests(ant)[0]["body"]["messages"];
  REQUIRE(ant_msgs.size() == 3);
  CHECK(ant_msgs[2] == Value::parse(R"({"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "c1", "content": "sunny"},
      {"type": "tool_result", "tool_use_id": "c2", "content": "noon"}]})"));

  auto gem = unique_key("gempar");
  gemini(gem, "ok")->chat(msgs);
  Value contents = fake_model_server().requests(gem)[0]["body"]["contents"];
  REQUIRE(contents.size() == 3);
  CHECK(contents[2] == Value::parse(R"({"role": "user", "parts": [
      {"functionResponse": {"name": "get_weather", "response": {"content": "sunny"}}},
      {"functionResponse": {"name": "get_time", "response": {"content": "noon"}}}]})"));
}

TEST_CASE("anthropic_chat and gemini_chat: a slow endpoint times out, is retried, then reported",
          "[models][anthropic][gemini][timeout]") {
  ChatOptions options;
  options.timeout = std::chrono::milliseconds(200);
  for (bool is_gemini : {false, true}) {
    INFO("gemini " << is_gemini);
    auto key = unique_key("slow");
    auto model = is_gemini ? gemini(key, "slow-1500") : anthropic(key, "slow-1500");
    Error e = error_from([&] { model->chat(conversation(), options); });
    CHECK(e.code() == ErrorCode::model_error);
    CHECK(e.retryable());
    CHECK_THAT(e.message(), Contains("timed out after 200 ms"));
    CHECK(fake_model_server().requests(key).size() == 3);  // 1 + max_retries
  }
}
