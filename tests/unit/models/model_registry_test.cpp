// ModelRegistry: the built-in echo, atomic replacement, versions, usage accounting, thread safety.
#include "model_registry.h"

#include "fake_model_server.h"
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

using namespace agentd::test;
using agentd::detail::ModelConfig;
using agentd::detail::ModelRegistry;
using agentd::detail::parse_model_configs;

namespace {

std::vector<Msg> ask(const std::string& text) { return {Msg("user", Value(text), "user")}; }

std::vector<ModelConfig> configs(const std::string& yaml) { return parse_model_configs(yaml, "reg.yaml"); }

}  // namespace

TEST_CASE("a new registry has only the built-in echo model", "[models][registry]") {
  ModelRegistry registry;
  CHECK(registry.names() == std::vector<std::string>{"echo"});
  CHECK(registry.version() == 1);
  auto echo = registry.get("echo");
  CHECK(echo->config_name() == "echo");
  CHECK(echo->model_type() == "echo");
  CHECK(echo->chat(ask("ping")).msg.content == "ping");
}

TEST_CASE("get() of an unknown config names the known ones", "[models][registry]") {
  ModelRegistry registry;
  registry.replace(
      configs("- {config_name: alpha, model_type: echo}\n- {config_name: beta, model_type: echo}\n"));
  try {
    registry.get("gamma");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains("'gamma'") && Contains("alpha, beta, echo"));
  }
}

TEST_CASE("replace() swaps all configs at once, and models in use keep working", "[models][registry]") {
  ModelRegistry registry;
  registry.replace(configs("- {config_name: a, model_type: echo, model_name: first}\n"));
  CHECK(registry.version() == 2);
  auto held = registry.get("a");

  CHECK(registry.replace(configs("- {config_name: b, model_type: echo}\n")) == 3);
  CHECK(registry.version() == 3);
  CHECK(registry.names() == std::vector<std::string>{"b", "echo"});
  CHECK_THROWS_AS(registry.get("a"), Error);
  // The caller that got "a" before the swap still has a working model.
  auto r = held->chat(ask("still here"));
  CHECK(r.msg.content == "still here");
  CHECK(r.msg.metadata["model_name"] == "first");
}

TEST_CASE("a config named echo overrides the built-in one", "[models][registry]") {
  ModelRegistry registry;
  registry.replace(configs("- {config_name: echo, model_type: echo, model_name: mine}\n"));
  CHECK(registry.names() == std::vector<std::string>{"echo"});
  CHECK(registry.get("echo")->chat(ask("x")).msg.metadata["model_name"] == "mine");
  registry.replace({});
  CHECK_FALSE(registry.get("echo")->chat(ask("x")).msg.metadata.contains("model_name"));  // built-in again
}

TEST_CASE("a failed replace() leaves the registry unchanged", "[models][registry]") {
  ModelRegistry registry;
  registry.replace(configs("- {config_name: keep, model_type: echo}\n"));
  ModelConfig bad;
  bad.config_name = "bad";
  bad.model_type = "no_such_type";
  CHECK_THROWS_WITH(registry.replace({bad}),
                    Contains("unknown model_type 'no_such_type'") && Contains("openai_chat"));
  auto dup = configs("- {config_name: d, model_type: echo}\n");
  dup.push_back(dup[0]);
  CHECK_THROWS_WITH(registry.replace(dup), Contains("duplicate config_name 'd'"));
  CHECK(registry.version() == 2);
  CHECK(registry.names() == std::vector<std::string>{"echo", "keep"});
}

TEST_CASE("each config carries the version that loaded it", "[models][registry]") {
  ModelRegistry registry;
  registry.replace(
      configs("- {config_name: same, model_type: echo}\n- {config_name: changes, model_type: echo}\n"));
  auto same_before = registry.get("same");
  registry.replace(
      configs("- {config_name: same, model_type: echo}\n"
              "- {config_name: changes, model_type: echo, delay_ms: 1}\n"));
  auto list = registry.list();
  REQUIRE(list.size() == 3);
  CHECK(list[0].config_name == "changes");
  CHECK(list[0].version == 3);
  CHECK(list[1].config_name == "echo");
  CHECK(list[2].config_name == "same");
  CHECK(list[2].version == 2);
  CHECK(registry.get("same") == same_before);  // unchanged config: same model object
}

TEST_CASE("usage is counted per config and in total, errors included", "[models][registry]") {
  ModelRegistry registry;
  int port = agentd::test::closed_port();
  registry.replace(
      configs("- {config_name: e, model_type: echo}\n"
              "- config_name: down\n  model_type: openai_chat\n  model_name: m\n"
              "  client_args: {base_url: 'http://127.0.0.1:" +
              std::to_string(port) + "/v1', max_retries: 0}\n"));
  registry.get("e")->chat(ask("one two"));
  registry.get("e")->stream(ask("three"), [](std::string_view) {});
  CHECK_THROWS_AS(registry.get("down")->chat(ask("x")), Error);

  auto list = registry.list();
  REQUIRE(list.size() == 3);
  const auto& down = list[0];
  const auto& e = list[1];
  CHECK(down.config_name == "down");
  CHECK(down.usage.calls == 1);
  CHECK(down.usage.errors == 1);
  CHECK(e.usage.calls == 2);
  CHECK(e.usage.errors == 0);
  CHECK(e.usage.prompt_tokens == 3);
  CHECK(e.usage.completion_tokens == 3);

  // Counters survive a reload of the same name.
  registry.replace(configs("- {config_name: e, model_type: echo, delay_ms: 0}\n"));
  registry.get("e")->chat(ask("four"));
  auto total = registry.total_usage();
  CHECK(total.calls == 4);
  CHECK(total.errors == 1);
  CHECK(total.prompt_tokens == 4);
}

TEST_CASE("get() and replace() from many threads at once", "[models][registry][threads]") {
  ModelRegistry registry;
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto m = registry.get("echo");  // present in every version
        if (m->chat(ask("hi")).msg.content == "hi") answered.fetch_add(1);
        try {
          registry.get("x")->chat(ask("hi"));
        } catch (const Error&) {
          // absent in some versions
        }
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    registry.replace(i % 2 == 0 ? configs("- {config_name: x, model_type: echo}\n")
                                : std::vector<ModelConfig>{});
  }
  // Let every reader finish at least a few rounds before stopping them (no fixed sleep).
  while (answered.load() < 8) std::this_thread::yield();
  stop = true;
  for (auto& t : readers) t.join();
  CHECK(registry.version() == 201);
  CHECK(answered.load() > 0);
}

TEST_CASE("with_usage_counters records into every counter given", "[models][registry]") {
  ModelRegistry registry;
  auto mine = std::make_shared<agentd::detail::UsageCounter>();
  auto model = agentd::detail::with_usage_counters(registry.get("echo"), {mine});
  model->chat(ask("a b c"));
  CHECK(mine->snapshot().calls == 1);
  CHECK(mine->snapshot().completion_tokens == 3);
  CHECK(registry.total_usage().calls == 1);  // the registry's own counter saw it too
}
