// zhipuai_chat, yi_chat, litellm_chat (the OpenAI protocol), ollama_generate and the embedding
// types, over real HTTP against fake_model_server.py.
#include "fake_model_server.h"
#include "model_registry.h"
#include "model_test_support.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using agentd::ChatModel;
using agentd::ChatResponse;
using agentd::EmbeddingResponse;
using namespace agentd::test;

// --- the OpenAI chat protocol under other names -----------------------------------------------

TEST_CASE("zhipuai_chat, yi_chat, litellm_chat speak OpenAI's protocol at client_args.base_url",
          "[models][openai_compatible]") {
  for (const char* type : {"zhipuai_chat", "yi_chat", "litellm_chat"}) {
    INFO(type);
    auto key = unique_key(type);
    auto model = model_from_yaml(std::string("- config_name: m\n  model_type: ") + type +
                                 "\n  model_name: some-model\n  api_key: key-123\n"
                                 "  generate_args: {temperature: 0.1}\n  client_args: {base_url: \"" +
                                 fake_model_server().base(key, "ok") + "/v1\", max_retries: 1}\n");
    ChatResponse r = model->chat(conversation());
    CHECK(r.msg.content == "echo: hello there model");
    CHECK(r.msg.metadata["model_type"] == type);
    CHECK(r.usage.total_tokens == 11);
    std::string got;
    CHECK(model->stream(conversation("a b"), [&](std::string_view c) { got += c; }).msg.content ==
          "echo: a b");
    CHECK(got == "echo: a b");
    Value req = fake_model_server().requests(key)[0];
    CHECK(req["path"] == "/s/" + key + "/ok/v1/chat/completions");
    CHECK(req["headers"]["authorization"] == "Bearer key-123");
    CHECK(req["body"]["model"] == "some-model");
    CHECK(req["body"]["temperature"] == 0.1);
  }
}

TEST_CASE("yi_chat: AgentScope's top-level temperature, top_p and max_tokens are sent",
          "[models][openai_compatible]") {
  auto key = unique_key("yi");
  auto model = model_from_yaml(
      R"([{"config_name": "yi_yi-large", "model_type": "yi_chat", "model_name": "yi-large",
      "api_key": "k", "temperature": 0.3, "top_p": 0.9, "max_tokens": 1000,
      "client_args": {"base_url": ")" +
      fake_model_server().base(key, "fail-503-1") + R"(/v1", "retry_initial_delay": 0.01}}])");
  CHECK(model->chat(conversation()).msg.content == "echo: hello there model");
  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() == 2);  // the 503 was retried
  CHECK(reqs[1]["body"]["temperature"] == 0.3);
  CHECK(reqs[1]["body"]["top_p"] == 0.9);
  CHECK(reqs[1]["body"]["max_tokens"] == 1000);
}

// --- ollama_generate ------------------------------------------------------------------------

namespace {
std::shared_ptr<ChatModel> ollama_generate(const std::string& key, const std::string& scenario) {
  return model_from_yaml(
      "- config_name: gen\n  model_type: ollama_generate\n  model_name: llama3\n"
      "  options: {temperature: 0.7}\n  keep_alive: 5m\n  host: " +
      fake_model_server().base(key, scenario) + "\n  client_args: " + kFastClientArgs + "\n");
}
}  // namespace

TEST_CASE("ollama_generate: /api/generate with prompt, system, options and keep_alive",
          "[models][ollama_generate]") {
  auto key = unique_key("gen");
  auto model = ollama_generate(key, "ok");
  ChatResponse r = model->chat(conversation());
  CHECK(r.msg.content == "echo: hello there model");
  CHECK(r.usage.prompt_tokens == 4);
  CHECK(r.usage.completion_tokens == 4);
  Value req = fake_model_server().requests(key)[0];
  CHECK(req["path"] == "/s/" + key + "/ok/api/generate");
  CHECK(req["body"] ==
        Value::parse(R"({"model": "llama3", "prompt": "hello there model", "system": "You are a test.",
      "stream": false, "options": {"temperature": 0.7}, "keep_alive": "5m"})"));

  std::vector<Msg> dialogue = {Msg("alice", Value("hi"), "user"), Msg("bob", Value("hello"), "assistant")};
  model->chat(dialogue);
  CHECK(fake_model_server().requests(key)[1]["body"]["prompt"] == "alice: hi\nbob: hello");
}

TEST_CASE("ollama_generate: streams NDJSON, and a cut stream and errors are model_errors",
          "[models][ollama_generate][stream]") {
  std::vector<std::string> chunks;
  ChatResponse r =
      ollama_generate(unique_key("genstream"), "ok")->stream(conversation("x y"), [&](std::string_view c) {
        chunks.emplace_back(c);
      });
  CHECK(chunks == std::vector<std::string>{"echo: ", "x ", "y"});
  CHECK(r.usage.completion_tokens == 3);

  Error cut = error_from([&] {
    ollama_generate(unique_key("gencut"), "truncated")->stream(conversation("a b c"), [](std::string_view) {
    });
  });
  CHECK_THAT(cut.message(), Contains("ended before it was complete"));

  auto key = unique_key("gen500");
  Error e = error_from([&] { ollama_generate(key, "fail-500-0")->chat(conversation()); });
  CHECK_THAT(e.message(), Contains("HTTP 500") && Contains("ollama says status 500"));
  CHECK(fake_model_server().requests(key).size() == 3);
  CHECK_THAT(
      error_from([&] { ollama_generate(unique_key("geng"), "garbage")->chat(conversation()); }).message(),
      Contains("invalid JSON"));
}

// --- embeddings -----------------------------------------------------------------------------

namespace {

// An embedding model of `type` at the fake server; `path` is the base URL's suffix.
std::shared_ptr<ChatModel> embedder(const std::string& type, const std::string& key,
                                    const std::string& scenario, const std::string& model_name = "emb-1") {
  std::string base = fake_model_server().base(key, scenario);
  bool ollama = type == "ollama_embedding";
  if (type == "openai_embedding" || type == "zhipuai_embedding") base += "/v1";
  if (type == "dashscope_text_embedding") base += "/api/v1";
  if (type == "gemini_embedding") base += "/v1beta";
  return model_from_yaml("- config_name: emb\n  model_type: " + type + "\n  model_name: " + model_name +
                         "\n  api_key: emb-secret-5\n" + (ollama ? "  host: " + base + "\n" : "") +
                         "  client_args: {" + (ollama ? "" : "base_url: \"" + base + "\", ") +
                         "timeout: 5, max_retries: 2, retry_initial_delay: 0.02}\n");
}

const std::vector<std::string> kTexts = {"one", "two words", "three little words"};

void check_vectors(const EmbeddingResponse& r) {
  REQUIRE(r.embeddings.size() == 3);
  CHECK(r.embeddings[0] == std::vector<double>{3, 1, 0});
  CHECK(r.embeddings[1] == std::vector<double>{9, 2, 1});
  CHECK(r.embeddings[2] == std::vector<double>{18, 3, 2});
}

const std::vector<std::string> kEmbeddingTypes = {"openai_embedding", "zhipuai_embedding", "ollama_embedding",
                                                  "dashscope_text_embedding", "gemini_embedding"};

}  // namespace

TEST_CASE("openai_embedding and zhipuai_embedding: POST /embeddings, vectors in input order, usage",
          "[models][embedding]") {
  for (const char* type : {"openai_embedding", "zhipuai_embedding"}) {
    INFO(type);
    auto key = unique_key(type);
    EmbeddingResponse r = embedder(type, key, "ok")->embed(kTexts);
    check_vectors(r);  // the fake answers in reverse index order
    CHECK(r.usage.prompt_tokens == 6);
    CHECK(r.usage.total_tokens == 6);
    Value req = fake_model_server().requests(key)[0];
    CHECK(req["path"] == "/s/" + key + "/ok/v1/embeddings");
    CHECK(req["headers"]["authorization"] == "Bearer emb-secret-5");
    CHECK(req["body"] == Value{{"model", "emb-1"}, {"input", kTexts}});
  }
}

TEST_CASE("ollama_embedding: POST /api/embed with options", "[models][embedding]") {
  auto key = unique_key("oemb");
  EmbeddingResponse r = embedder("ollama_embedding", key, "ok")->embed(kTexts);
  check_vectors(r);
  CHECK(r.usage.prompt_tokens == 6);
  Value req = fake_model_server().requests(key)[0];
  CHECK(req["path"] == "/s/" + key + "/ok/api/embed");
  CHECK(req["body"] == Value{{"model", "emb-1"}, {"input", kTexts}});
}

TEST_CASE("dashscope_text_embedding: input.texts and output.embeddings", "[models][embedding]") {
  auto key = unique_key("dsemb");
  agentd::EmbedOptions options;
  options.generate_args = {{"dimension", 3}};
  EmbeddingResponse r = embedder("dashscope_text_embedding", key, "ok")->embed(kTexts, options);
  check_vectors(r);
  CHECK(r.usage.prompt_tokens == 6);
  Value req = fake_model_server().requests(key)[0];
  CHECK(req["path"] == "/s/" + key + "/ok/api/v1/services/embeddings/text-embedding/text-embedding");
  CHECK(req["body"] == Value::parse(R"({"model": "emb-1", "input": {"texts": ["one", "two words",
      "three little words"]}, "parameters": {"dimension": 3}})"));
}

TEST_CASE("gemini_embedding: batchEmbedContents, AgentScope's models/ prefix accepted",
          "[models][embedding]") {
  auto key = unique_key("gemb");
  EmbeddingResponse r = embedder("gemini_embedding", key, "ok", "models/embedding-001")->embed(kTexts);
  check_vectors(r);
  Value req = fake_model_server().requests(key)[0];
  CHECK(req["path"] == "/s/" + key + "/ok/v1beta/models/embedding-001:batchEmbedContents");
  CHECK(req["headers"]["x-goog-api-key"] == "emb-secret-5");
  REQUIRE(req["body"]["requests"].size() == 3);
  CHECK(req["body"]["requests"][1] ==
        Value::parse(R"({"model": "models/embedding-001", "content": {"parts": [{"text": "two words"}]}})"));
}

TEST_CASE("embeddings: 5xx and 429 are retried, 4xx is not, malformed answers are model_errors",
          "[models][embedding][retry]") {
  for (const auto& type : kEmbeddingTypes) {
    INFO(type);
    auto key = unique_key("embretry");
    check_vectors(embedder(type, key, "fail-502-2")->embed(kTexts));
    CHECK(fake_model_server().requests(key).size() == 3);

    auto key429 = unique_key("emb429");
    check_vectors(embedder(type, key429, "ratelimitms-1-10")->embed(kTexts));
    CHECK(fake_model_server().requests(key429).size() == 2);

    auto key400 = unique_key("emb400");
    Error e = error_from([&] { embedder(type, key400, "fail-400-0")->embed(kTexts); });
    CHECK(e.code() == ErrorCode::model_error);
    CHECK_THAT(e.message(), Contains("model 'emb'") && Contains("HTTP 400") && !Contains("emb-secret-5"));
    CHECK(fake_model_server().requests(key400).size() == 1);

    CHECK_THAT(error_from([&] { embedder(type, unique_key("embg"), "garbage")->embed(kTexts); }).message(),
               Contains("invalid JSON"));
    CHECK_THAT(error_from([&] { embedder(type, unique_key("embw"), "wrongcount")->embed(kTexts); }).message(),
               Contains("2 embeddings for 3 texts"));
    CHECK_THAT(error_from([&] { embedder(type, unique_key("embn"), "notnumbers")->embed(kTexts); }).message(),
               Contains("not a list of numbers"));
  }
}

TEST_CASE("embeddings: no texts means no request", "[models][embedding]") {
  auto key = unique_key("embnone");
  CHECK(embedder("openai_embedding", key, "ok")->embed({}).embeddings.empty());
  CHECK(fake_model_server().requests(key).empty());
}

TEST_CASE("chat on an embedding model and embed on a chat model are clear model_errors",
          "[models][embedding]") {
  auto emb = embedder("openai_embedding", unique_key("embchat"), "ok");
  Error e = error_from([&] { emb->chat(conversation()); });
  CHECK(e.code() == ErrorCode::model_error);
  CHECK_THAT(e.message(),
             Contains("model 'emb'") && Contains("openai_embedding makes embeddings") && Contains("embed()"));
  auto chat = model_from_yaml("- config_name: e\n  model_type: echo\n");
  Error e2 = error_from([&] { chat->embed(kTexts); });
  CHECK(e2.code() == ErrorCode::model_error);
  CHECK_THAT(e2.message(), Contains("model 'e' (model_type echo) does not make embeddings"));
}

TEST_CASE("embedding tokens are counted like chat tokens by the registry", "[models][embedding][registry]") {
  auto key = unique_key("embcount");
  auto configs = agentd::detail::parse_model_configs(
      "- config_name: emb\n  model_type: openai_embedding\n  model_name: e\n  client_args: {base_url: \"" +
          fake_model_server().base(key, "ok") + "/v1\"}\n",
      "test.yaml");
  agentd::detail::ModelRegistry registry;
  registry.replace(configs);
  auto model = registry.get("emb");
  model->embed(kTexts);
  model->embed({"a b"});
  agentd::detail::ModelUsage usage;
  for (const auto& info : registry.list()) {
    if (info.config_name == "emb") usage = info.usage;
  }
  CHECK(usage.calls == 2);
  CHECK(usage.errors == 0);
  CHECK(usage.prompt_tokens == 8);
  CHECK(usage.completion_tokens == 0);
}
