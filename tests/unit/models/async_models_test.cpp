
// Asynchronous model calls (chat_async, stream_async) on a KJ loop over real HTTP, against
// fake_model_server.py: the same answers, retries, timeouts and usage as the blocking calls;
// cancellation; max_concurrency; many requests in flight without threads; kept-alive connections.
#include "async_http.h"
#include "bridge.h"
#include "fake_model_server.h"
#include "subprocess.h"  // thread_count
#include "kj_errors.h"
#include "model_test_support.h"
#include "worker_pool.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>
#include <kj/async-io.h>
#include <kj/vector.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

using agentd::ChatModel;
using agentd::ChatOptions;
using agentd::ChatResponse;
using agentd::Error;
using agentd::ErrorCode;
using agentd::Msg;
using agentd::Value;
using agentd::detail::AsyncHttp;
using namespace agentd::test;

namespace {

// The test's own KJ loop and the AsyncHttp on it.
struct Loop {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  AsyncHttp http{io};

  // Runs the loop until p settles; a rejection is thrown as the agentd::Error it carries.
  template <typename T>
  T await(kj::Promise<T> p) {
    try {
      return p.wait(io.waitScope);
    } catch (const kj::Exception& e) {
      throw agentd::detail::error_from_kj(e);
    }
  }

  // Runs the loop (I/O included) until ready() holds; fails the test after 20 s.
  template <typename F>
  void until(F&& ready) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ready()) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      io.provider->getTimer().afterDelay(2 * kj::MILLISECONDS).wait(io.waitScope);
    }
  }
};

// client_args lines (after base_url) that keep the tests fast.
const std::string kFast = "    timeout: 5\n    max_retries: 2\n    retry_initial_delay: 0.02\n";

std::shared_ptr<ChatModel> openai(const std::string& key, const std::string& scenario,
                                  const std::string& extra, const std::string& client_args) {
  return model_from_yaml(
      "- config_name: gpt-" + key + "\n  model_type: openai_chat\n  model_name: test-model\n" +
      "  api_key: sk-secret-key-123\n" + extra +
      "  client_args:\n    base_url: " + fake_model_server().base(key, scenario) + "/v1\n" + client_args);
}

std::string stream_text(Loop& loop, const std::shared_ptr<ChatModel>& model, ChatResponse& out,
                        std::vector<std::string>& chunks) {
  const auto loop_thread = std::this_thread::get_id();
  bool on_loop = true;
  out = loop.await(agentd::detail::stream_async(model, loop.http, conversation(), [&](std::string_view c) {
    on_loop = on_loop && std::this_thread::get_id() == loop_thread;
    chunks.emplace_back(c);
  }));
  REQUIRE(on_loop);
  std::string joined;
  for (auto& c : chunks) joined += c;
  return joined;
}

void check_chat_and_stream(const std::shared_ptr<ChatModel>& model) {
  Loop loop;
  ChatResponse r = loop.await(agentd::detail::chat_async(model, loop.http, conversation()));
  CHECK(r.msg.text() == "echo: hello there model");
  CHECK(r.msg.role == "assistant");
  CHECK(r.usage.completion_tokens > 0);

  ChatResponse s;
  std::vector<std::string> chunks;
  std::string joined = stream_text(loop, model, s, chunks);
  CHECK(chunks.size() > 1);
  CHECK(joined == "echo: hello there model");
  CHECK(s.msg.text() == joined);
}

}  // namespace

TEST_CASE("chat_async and stream_async: openai_chat answers as chat() does, chunks on the loop thread",
          "[models][async]") {
  auto key = unique_key("async-openai");
  auto model = openai(key, "ok", "", kFast);
  check_chat_and_stream(model);
  auto sent = fake_model_server().requests(key);
  REQUIRE(sent.size() == 2);
  CHECK(sent[0]["body"]["model"] == "test-model");
  CHECK(sent[0]["headers"]["authorization"] == "Bearer sk-secret-key-123");
  CHECK(sent[1]["body"]["stream"] == true);
  // Both calls went over one kept-alive connection.
  CHECK(sent[0]["peer"] == sent[1]["peer"]);
}

TEST_CASE("chat_async and stream_async: anthropic_chat, gemini_chat and ollama_chat", "[models][async]") {
  SECTION("anthropic_chat") {
    auto key = unique_key("async-anthropic");
    check_chat_and_stream(
        model_from_yaml("- config_name: claude\n  model_type: anthropic_chat\n  model_name: claude-3-opus\n  "
                        "api_key: sk-ant-1\n"
                        "  client_args:\n    base_url: " +
                        fake_model_server().base(key, "ok") + "\n" + kFast));
    CHECK(fake_model_server().requests(key)[0]["path"].get<std::string>().find("/v1/messages") !=
          std::string::npos);
  }
  SECTION("gemini_chat") {
    auto key = unique_key("async-gemini");
    check_chat_and_stream(model_from_yaml(
        "- config_name: gem\n  model_type: gemini_chat\n  model_name: gemini-pro\n  api_key: goog-1\n"
        "  client_args:\n    base_url: " +
        fake_model_server().base(key, "ok") + "/v1beta\n" + kFast));
    auto sent = fake_model_server().requests(key);
    REQUIRE(sent.size() == 2);
    CHECK(sent[1]["path"].get<std::string>().find(":streamGenerateContent") != std::string::npos);
  }
  SECTION("ollama_chat") {
    auto key = unique_key("async-ollama");
    check_chat_and_stream(
        model_from_yaml("- config_name: llama\n  model_type: ollama_chat\n  model_name: llama3\n"
                        "  host: " +
                        fake_model_server().base(key, "ok") + "\n  client_args:\n" + kFast));
    CHECK(fake_model_server().requests(key)[0]["path"].get<std::string>().find("/api/chat") !=
          std::string::npos);
  }
  SECTION("post_api_chat (no streaming: one chunk)") {
    auto key = unique_key("async-post");
    auto model = model_from_yaml("- config_name: p\n  model_type: post_api_chat\n  api_url: " +
                                 fake_model_server().base(key, "openai") + "/post\n");
    Loop loop;
    ChatResponse s;
    std::vector<std::string> chunks;
    CHECK(stream_text(loop, model, s, chunks) == "echo: hello there model");
    CHECK(chunks.size() == 1);
  }
}

TEST_CASE("chat_async retries 5xx and 429 with backoff, and fails as chat() fails", "[models][async]") {
  Loop loop;
  SECTION("two 503s, then an answer") {
    auto key = unique_key("async-retry");
    ChatResponse r = loop.await(
        agentd::detail::chat_async(openai(key, "fail-503-2", "", kFast), loop.http, conversation()));
    CHECK(r.msg.text() == "echo: hello there model");
    CHECK(fake_model_server().requests(key).size() == 3);
  }
  SECTION("429 with retry-after-ms is waited for") {
    auto key = unique_key("async-429");
    ChatResponse r = loop.await(
        agentd::detail::chat_async(openai(key, "ratelimitms-1-150", "", kFast), loop.http, conversation()));
    CHECK(r.msg.text() == "echo: hello there model");
    auto sent = fake_model_server().requests(key);
    REQUIRE(sent.size() == 2);
    CHECK(sent[1]["t"].get<double>() - sent[0]["t"].get<double>() >= 0.14);
  }
  SECTION("always 500: a retryable model_error after every attempt") {
    auto key = unique_key("async-500");
    Error e = error_from([&] {
      loop.await(agentd::detail::chat_async(openai(key, "fail-500-0", "", kFast), loop.http, conversation()));
    });
    CHECK(e.code() == agentd::ErrorCode::model_error);
    CHECK(e.retryable());
    CHECK_THAT(e.message(), Catch::Contains("HTTP 500") && Catch::Contains("server says status 500") &&
                                Catch::Contains("after 3 attempts"));
    CHECK(fake_model_server().requests(key).size() == 3);
  }
  SECTION("400: no retry, not retryable, the key redacted") {
    auto key = unique_key("async-401");
    Error e = error_from([&] {
      loop.await(agentd::detail::chat_async(openai(key, "keyecho", "", kFast), loop.http, conversation()));
    });
    CHECK(e.code() == agentd::ErrorCode::model_error);
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.message(), Catch::Contains("HTTP 401") && !Catch::Contains("sk-secret-key-123"));
    CHECK(fake_model_server().requests(key).size() == 1);
  }
  SECTION("an invalid stream event fails the stream call with the parser's error") {
    auto key = unique_key("async-garbage");
    Error e = error_from([&] {
      loop.await(agentd::detail::stream_async(openai(key, "garbagestream", "", kFast), loop.http,
                                              conversation(), [](std::string_view) {}));
    });
    CHECK(e.code() == agentd::ErrorCode::model_error);
    CHECK_THAT(e.message(), Catch::Contains("invalid JSON in a stream event"));
  }
  CHECK(loop.http.transfers() == 0);
}

TEST_CASE("chat_async and stream_async time out as the blocking calls do", "[models][async]") {
  Loop loop;
  const std::string quick = "    timeout: 0.3\n    max_retries: 0\n";
  SECTION("a silent answer") {
    auto key = unique_key("async-timeout");
    Error e = error_from([&] {
      loop.await(agentd::detail::chat_async(openai(key, "slow-3000", "", quick), loop.http, conversation()));
    });
    CHECK(e.retryable());
    CHECK_THAT(e.message(), Catch::Contains("timed out after 300 ms"));
  }
  SECTION("a stream that goes silent") {
    auto key = unique_key("async-idle");
    std::vector<std::string> chunks;
    Error e = error_from([&] {
      loop.await(agentd::detail::stream_async(openai(key, "slowstream-3000", "", quick), loop.http,
                                              conversation(),
                                              [&](std::string_view c) { chunks.emplace_back(c); }));
    });
    CHECK(chunks.size() == 1);  // what came before the silence
    CHECK_THAT(e.message(), Catch::Contains("no data for 300 ms"));
  }
  CHECK(loop.http.transfers() == 0);
}

TEST_CASE("dropping a chat_async promise cancels its request, in flight or queued", "[models][async]") {
  Loop loop;
  auto key = unique_key("async-cancel");
  auto model = openai(key, "slow-5000", "  max_concurrency: 1\n", kFast);
  auto first = agentd::detail::chat_async(model, loop.http, conversation("first"));
  auto queued = agentd::detail::chat_async(model, loop.http, conversation("second"));
  loop.until([&] { return fake_model_server().stats(key)["in_flight"] == 1; });
  CHECK(loop.http.transfers() == 1);  // the second waits for its place
  const auto started = std::chrono::steady_clock::now();
  first = nullptr;
  queued = nullptr;
  CHECK(loop.http.transfers() == 0);
  CHECK(loop.http.sockets() == 0);  // the connection of the abandoned answer is closed

  // The model's queue freed its place: a new call (same config, limit 1) goes out at once.
  auto again = openai(key, "ok", "  max_concurrency: 1\n", kFast);
  ChatResponse r = loop.await(agentd::detail::chat_async(again, loop.http, conversation("third")));
  CHECK(r.msg.text() == "echo: third");
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(4));
  auto sent = fake_model_server().requests(key);
  REQUIRE(sent.size() == 2);  // the queued call never went out
  CHECK(sent[1]["body"]["messages"][1]["content"] == "third");

  SECTION("a stream cancelled by its own chunk callback") {
    auto stream_key = unique_key("async-cancel-stream");
    kj::Promise<ChatResponse> call = nullptr;
    int seen = 0;
    auto stream_model = openai(stream_key, "slowstream-5000", "", kFast);
    call = agentd::detail::stream_async(stream_model, loop.http, conversation(), [&](std::string_view) {
      ++seen;
      call = nullptr;  // drops the call from inside libcurl's callback
    });
    loop.until([&] { return seen > 0 && loop.http.transfers() == 0; });
    CHECK(seen == 1);
  }
}

TEST_CASE("max_concurrency bounds the calls of a model in flight and the rest wait in FIFO order",
          "[models][async]") {
  Loop loop;
  auto key = unique_key("async-limit");
  auto model = openai(key, "slow-150", "  max_concurrency: 3\n", kFast);
  kj::Vector<kj::Promise<ChatResponse>> calls;
  for (int i = 0; i < 12; ++i) {
    calls.add(agentd::detail::chat_async(model, loop.http, conversation("call " + std::to_string(i))));
  }
  auto all = loop.await(kj::joinPromises(calls.releaseAsArray()));
  REQUIRE(all.size() == 12);
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i].msg.text() == "echo: call " + std::to_string(i));
  CHECK(fake_model_server().stats(key)["max_in_flight"] == 3);
  // FIFO: the first three calls went out first; the others only as places were freed.
  auto sent = fake_model_server().requests(key);
  REQUIRE(sent.size() == 12);
  std::set<std::string> first3;
  for (std::size_t i = 0; i < 3; ++i)
    first3.insert(sent[i]["body"]["messages"][1]["content"].get<std::string>());
  CHECK(first3 == std::set<std::string>{"call 0", "call 1", "call 2"});
}

TEST_CASE("hundreds of chat_async calls in flight start no thread and share kept-alive connections",
          "[models][async]") {
  Loop loop;
  auto key = unique_key("async-many");
  auto model = openai(key, "slow-1000", "  max_concurrency: 1000\n", kFast);
  const std::size_t before = agentd::detail::thread_count();
  constexpr int kCalls = 300;
  kj::Vector<kj::Promise<ChatResponse>> calls;
  for (int i = 0; i < kCalls; ++i) calls.add(agentd::detail::chat_async(model, loop.http, conversation()));
  std::size_t most = before;
  bool done = false;
  auto joined = kj::joinPromises(calls.releaseAsArray()).then([&](kj::Array<ChatResponse> all) {
    done = true;
    return all.size();
  });
  auto forked = joined.fork();
  auto result = forked.addBranch();
  loop.until([&] {
    most = std::max(most, agentd::detail::thread_count());
    return done;
  });
  CHECK(result.wait(loop.io.waitScope) == static_cast<std::size_t>(kCalls));
  CHECK(most == before);
  CHECK(agentd::detail::thread_count() == before);
  CHECK(fake_model_server().stats(key)["max_in_flight"].get<int>() > kCalls / 2);

  // Spread over multi handles of at most kShardTransfers each, so that libcurl's search for a
  // connection to reuse walks a shard's connections, not all of them (async_http.h, "Shards").
  CHECK(loop.http.shards() == (kCalls + AsyncHttp::kShardTransfers - 1) / AsyncHttp::kShardTransfers);

  // The connections stay open and serve the next calls: three one at a time, then a burst as
  // large as the first, which finds the first burst's connections in every shard.
  auto burst = fake_model_server().requests(key);
  std::set<int> peers;
  for (const auto& r : burst) peers.insert(r["peer"].get<int>());
  CHECK(peers.size() > static_cast<std::size_t>(kCalls) / 2);  // a connection per concurrent request
  for (int i = 0; i < 3; ++i) loop.await(agentd::detail::chat_async(model, loop.http, conversation()));
  kj::Vector<kj::Promise<ChatResponse>> again;
  for (int i = 0; i < kCalls; ++i) again.add(agentd::detail::chat_async(model, loop.http, conversation()));
  CHECK(loop.await(kj::joinPromises(again.releaseAsArray())).size() == static_cast<std::size_t>(kCalls));
  auto sent = fake_model_server().requests(key);
  REQUIRE(sent.size() == 2 * static_cast<std::size_t>(kCalls) + 3);
  std::size_t new_connections = 0;
  for (std::size_t i = kCalls; i < sent.size(); ++i)
    new_connections += peers.count(sent[i]["peer"].get<int>()) == 0;
  CHECK(new_connections == 0);
  CHECK(loop.http.shards() == (kCalls + AsyncHttp::kShardTransfers - 1) / AsyncHttp::kShardTransfers);
}

TEST_CASE("chat_async through the registry counts usage and errors like chat()", "[models][async]") {
  Loop loop;
  agentd::detail::ModelRegistry registry;
  auto key = unique_key("async-usage");
  auto configs = agentd::detail::parse_model_configs(
      "- config_name: counted\n  model_type: openai_chat\n  model_name: m\n  client_args:\n    base_url: " +
          fake_model_server().base(key, "ok") + "/v1\n" + kFast +
          "- config_name: broken\n  model_type: openai_chat\n  model_name: m\n  client_args:\n    "
          "base_url: " +
          fake_model_server().base(key, "fail-400-0") + "/v1\n" + kFast,
      "test.yaml");
  registry.replace(configs);
  auto model = registry.get("counted");
  ChatResponse r = loop.await(agentd::detail::chat_async(model, loop.http, conversation()));
  CHECK_THROWS_AS(loop.await(agentd::detail::chat_async(registry.get("broken"), loop.http, conversation())),
                  Error);
  // A reload that drops the model: the call in hand still works.
  registry.replace({});
  loop.await(agentd::detail::stream_async(model, loop.http, conversation(), [](std::string_view) {}));
  for (const auto& info : registry.list()) {
    if (info.config_name == "echo") continue;
    FAIL("unexpected model " + info.config_name);
  }
  auto usage = registry.total_usage();
  CHECK(usage.calls == 3);
  CHECK(usage.errors == 1);
  CHECK(usage.completion_tokens == 2 * r.usage.completion_tokens);
}

TEST_CASE("echo answers chat_async on the loop and delay_ms waits on the loop's timer", "[models][async]") {
  Loop loop;
  auto model = model_from_yaml("- config_name: e\n  model_type: echo\n  delay_ms: 200\n");
  const std::size_t before = agentd::detail::thread_count();
  kj::Vector<kj::Promise<ChatResponse>> calls;
  for (int i = 0; i < 100; ++i) calls.add(agentd::detail::chat_async(model, loop.http, conversation("hi")));
  auto all = loop.await(kj::joinPromises(calls.releaseAsArray()));
  CHECK(agentd::detail::thread_count() == before);
  CHECK(all[99].msg.text() == "hi");
  CHECK(all[99].latency >= std::chrono::milliseconds(200));
  std::vector<std::string> chunks;
  ChatResponse s = loop.await(agentd::detail::stream_async(
      model, loop.http, conversation("a b c"), [&](std::string_view c) { chunks.emplace_back(c); }));
  CHECK(chunks == std::vector<std::string>{"a ", "b ", "c"});
}

namespace {

// A model with only the blocking interface (as a plugin might bring).
class BlockingOnlyModel final : public ChatModel {
 public:
  const std::string& config_name() const override { return name_; }
  const std::string& model_type() const override { return name_; }
  ChatResponse chat(const std::vector<Msg>& messages, const ChatOptions&) override {
    thread_ = std::this_thread::get_id();
    if (messages.back().text() == "fail")
      throw Error(ErrorCode::model_error, "model 'blocking': it failed", {}, {}, true);
    ChatResponse r;
    r.msg = Msg("assistant", Value("blocking: " + messages.back().text()), "assistant");
    return r;
  }
  ChatResponse stream(const std::vector<Msg>& messages, const std::function<void(std::string_view)>& on_chunk,
                      const ChatOptions& options) override {
    for (const char* piece : {"one ", "two ", "three"}) on_chunk(piece);
    return chat(messages, options);
  }
  std::thread::id thread_;

 private:
  std::string name_ = "blocking";
};

}  // namespace

TEST_CASE("a model without an asynchronous path runs on the worker pool and resolves on the loop",
          "[models][async]") {
  auto io = kj::setupAsyncIo();
  agentd::detail::Bridge bridge(io.unixEventPort);
  agentd::detail::WorkerPool pool(1, 4);
  AsyncHttp http(io, &pool, &bridge);
  auto draining = bridge.run().eagerlyEvaluate(nullptr);
  auto model = std::make_shared<BlockingOnlyModel>();

  ChatResponse r = agentd::detail::chat_async(model, http, conversation("x")).wait(io.waitScope);
  CHECK(r.msg.text() == "blocking: x");
  CHECK(model->thread_ != std::this_thread::get_id());

  std::vector<std::string> chunks;
  bool on_loop = true;
  const auto loop_thread = std::this_thread::get_id();
  r = agentd::detail::stream_async(model, http, conversation("y"), [&](std::string_view c) {
        on_loop = on_loop && std::this_thread::get_id() == loop_thread;
        chunks.emplace_back(c);
      }).wait(io.waitScope);
  CHECK(chunks == std::vector<std::string>{"one ", "two ", "three"});
  CHECK(on_loop);

  try {
    agentd::detail::chat_async(model, http, conversation("fail")).wait(io.waitScope);
    FAIL("expected a failure");
  } catch (const kj::Exception& e) {
    Error err = agentd::detail::error_from_kj(e);
    CHECK(err.code() == ErrorCode::model_error);
    CHECK(err.retryable());
    CHECK(err.message() == "model 'blocking': it failed");
  }
  pool.stop();
}

TEST_CASE("agentd::Error crosses a kj promise whole", "[models][async]") {
  Error original(ErrorCode::unknown_agent, "no agent 'a|b]: c'", "a|b]: c", "Some Class", true);
  Error back =
      agentd::detail::error_from_kj(agentd::detail::to_kj_exception(std::make_exception_ptr(original)));
  CHECK(back.code() == original.code());
  CHECK(back.message() == original.message());
  CHECK(back.agent_id() == original.agent_id());
  CHECK(back.agent_class() == original.agent_class());
  CHECK(back.retryable());
  kj::Exception fault(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::heapString("peer gone"));
  CHECK(agentd::detail::error_from_kj(fault).code() == ErrorCode::disconnected);
}

TEST_CASE("max_concurrency in a model config: a positive integer, 64 by default", "[models][async][config]") {
  using agentd::detail::parse_model_configs;
  CHECK(parse_model_configs("- {config_name: a, model_type: echo}\n", "m.yaml")[0].max_concurrency == 64);
  CHECK(parse_model_configs("- {config_name: a, model_type: echo, max_concurrency: 5}\n", "m.yaml")[0]
            .max_concurrency == 5);
  Error zero = error_from(
      [] { parse_model_configs("- {config_name: a, model_type: echo, max_concurrency: 0}\n", "m.yaml"); });
  CHECK(zero.code() == ErrorCode::config_error);
  CHECK_THAT(zero.message(),
             Catch::Contains("m.yaml:1:") && Catch::Contains("'max_concurrency' must be a positive integer"));
  Error word = error_from(
      [] { parse_model_configs("- {config_name: a, model_type: echo, max_concurrency: lots}\n", "m.yaml"); });
  CHECK_THAT(word.message(), Catch::Contains("'max_concurrency' must be a positive integer"));
}
