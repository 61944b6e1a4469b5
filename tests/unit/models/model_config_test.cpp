// Model config parsing: the accepted forms, and one test per error a bad config must report.
#include "model_config.h"
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>
#include <string>

using namespace agentd::test;
using agentd::detail::load_model_configs;
using agentd::detail::model_config_from_json;
using agentd::detail::parse_model_configs;

namespace {

// The config_error message parse_model_configs throws for `text`, or "" if it parsed.
std::string error_of(const std::string& text, const std::string& source = "models.yaml") {
  try {
    parse_model_configs(text, source);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
    return e.message();
  }
  return "";
}

}  // namespace

TEST_CASE("YAML configs parse with AgentScope's field names", "[models][config]") {
  auto configs = parse_model_configs(R"(
# two models
- config_name: gpt
  model_type: openai_chat
  model_name: gpt-4o-mini
  api_key: sk-test
  client_args:
    base_url: http://127.0.0.1:9/v1/
    timeout: 2.5
    max_retries: 5
    default_headers: {X-Team: agents}
  organization: org-1
  generate_args:
    temperature: 0.5
    max_tokens: 100
  stream: true
- config_name: local
  model_type: ollama_chat
  model_name: llama3
  options: {num_ctx: 4096}
  keep_alive: 5m
)",
                                     "models.yaml");
  REQUIRE(configs.size() == 2);
  const auto& gpt = configs[0];
  CHECK(gpt.config_name == "gpt");
  CHECK(gpt.model_type == "openai_chat");
  CHECK(gpt.model_name == "gpt-4o-mini");
  CHECK(gpt.api_key == "sk-test");
  CHECK(gpt.base_url == "http://127.0.0.1:9/v1");  // trailing slash dropped
  CHECK(gpt.timeout == std::chrono::milliseconds(2500));
  CHECK(gpt.max_retries == 5);
  CHECK(gpt.stream);
  CHECK(gpt.generate_args == agentd::Value{{"temperature", 0.5}, {"max_tokens", 100}});
  CHECK(gpt.headers["X-Team"] == "agents");
  CHECK(gpt.headers["OpenAI-Organization"] == "org-1");
  CHECK(gpt.raw["client_args"]["max_retries"] == 5);
  CHECK(gpt.source == "models.yaml:3:3");

  const auto& local = configs[1];
  CHECK(local.base_url == "http://localhost:11434");
  CHECK(local.extra["options"]["num_ctx"] == 4096);
  CHECK(local.extra["keep_alive"] == "5m");
  CHECK(local.max_retries == 3);  // the default
}

TEST_CASE("AgentScope's JSON model config files load unchanged", "[models][config]") {
  SECTION("a list") {
    auto configs = parse_model_configs(R"([
    {
        "config_name": "qwen",
        "model_type": "dashscope_chat",
        "model_name": "qwen-max",
        "api_key": "sk-xxx",
        "generate_args": {"temperature": 0.5}
    },
    {
        "config_name": "my_post_api",
        "model_type": "post_api_chat",
        "api_url": "https://example.invalid/api",
        "headers": {"Authorization": "Bearer xxx"},
        "json_args": {"model": "m", "temperature": 0},
        "messages_key": "messages",
        "max_retries": 2,
        "retry_interval": 0.5,
        "timeout": 10
    }
])",
                                       "agentscope.json");
    REQUIRE(configs.size() == 2);
    CHECK(configs[0].base_url == "https://dashscope.aliyuncs.com/api/v1");
    CHECK(configs[0].generate_args["temperature"] == 0.5);
    CHECK(configs[1].base_url == "https://example.invalid/api");
    CHECK(configs[1].max_retries == 2);
    CHECK(configs[1].retry_initial_delay == std::chrono::milliseconds(500));
    CHECK(configs[1].timeout == std::chrono::seconds(10));
    CHECK(configs[1].extra["messages_key"] == "messages");
    CHECK(configs[1].headers["Authorization"] == "Bearer xxx");
  }
  SECTION("a single object") {
    auto configs = parse_model_configs(R"({"config_name": "e", "model_type": "echo"})", "one.json");
    REQUIRE(configs.size() == 1);
    CHECK(configs[0].config_name == "e");
  }
}

TEST_CASE("an empty document has no configs", "[models][config]") {
  CHECK(parse_model_configs("", "empty.yaml").empty());
  CHECK(parse_model_configs("# only a comment\n", "empty.yaml").empty());
}

TEST_CASE("${ENV} is substituted in every string value", "[models][config]") {
  setenv("AGENTD_TEST_KEY", "sk-from-env", 1);
  setenv("AGENTD_TEST_RETRIES", "7", 1);
  unsetenv("AGENTD_TEST_UNSET");
  auto configs = parse_model_configs(R"(
- config_name: gpt
  model_type: openai_chat
  model_name: m-${AGENTD_TEST_UNSET:-default}
  api_key: ${AGENTD_TEST_KEY}
  client_args:
    max_retries: ${AGENTD_TEST_RETRIES}
    base_url: "http://h/$${NOT_A_VAR}"
)",
                                     "env.yaml");
  REQUIRE(configs.size() == 1);
  CHECK(configs[0].api_key == "sk-from-env");
  CHECK(configs[0].model_name == "m-default");
  CHECK(configs[0].max_retries == 7);
  CHECK(configs[0].raw["client_args"]["max_retries"] == 7);  // a plain scalar is typed after substitution
  CHECK(configs[0].base_url == "http://h/${NOT_A_VAR}");

  auto json = parse_model_configs(R"([{"config_name": "x", "model_type": "openai_chat",
      "model_name": "m", "api_key": "${AGENTD_TEST_KEY}"}])",
                                  "env.json");
  CHECK(json[0].api_key == "sk-from-env");
}

TEST_CASE("the shipped config/models.yaml loads with no environment and no network", "[models][config]") {
  for (const char* v : {"OPENAI_API_KEY", "DASHSCOPE_API_KEY", "DEEPSEEK_API_KEY", "OLLAMA_HOST"})
    unsetenv(v);
  auto configs = load_model_configs(std::string(AGENTD_SOURCE_DIR) + "/config/models.yaml");
  REQUIRE_FALSE(configs.empty());
  CHECK(configs[0].config_name == "echo");
  CHECK(configs[0].model_type == "echo");
  std::set<std::string> types;
  for (const auto& c : configs) types.insert(c.model_type);
  for (const auto& t : agentd::detail::known_model_types()) {
    INFO(t);
    CHECK(types.count(t) == 1);  // an example of every type
  }
}

// --- errors: one test each ----------------------------------------------------------------

TEST_CASE("config error: YAML syntax names line and column", "[models][config][errors]") {
  auto msg = error_of("- config_name: a\n  model_type: [echo\n");
  CHECK_THAT(msg, Contains("models.yaml:3:1") && Contains("invalid YAML"));
}

TEST_CASE("config error: JSON syntax names line and column", "[models][config][errors]") {
  auto msg = error_of("[\n  {\"config_name\": \"a\",\n   \"model_type\": \"echo\",,\n  }\n]", "m.json");
  CHECK_THAT(msg, Contains("m.json:3:") && Contains("invalid JSON"));
}

TEST_CASE("config error: a JSON number beyond a double is placed and named, not a crash",
          "[models][config][errors][hostile]") {
  // model_config_fuzz found it: nlohmann's out_of_range for such a number escaped the parser.
  auto msg = error_of("[{\"config_name\": \"a\",\n  \"model_type\": \"echo\", \"x\": 4e4444}]", "m.json");
  CHECK_THAT(msg, Contains("m.json:2:") && Contains("invalid JSON") && Contains("number overflow") &&
                      Contains("4e4444"));
}

TEST_CASE("config error: unknown model_type lists the valid ones", "[models][config][errors]") {
  auto msg = error_of("- config_name: gpt\n  model_type: opena_chat\n  model_name: x\n");
  CHECK_THAT(
      msg, Contains("models.yaml:2:15") && Contains("'gpt'") && Contains("unknown model_type 'opena_chat'") &&
               Contains("anthropic_chat, dashscope_chat, dashscope_text_embedding, echo, gemini_chat, "
                        "gemini_embedding, litellm_chat, ollama_chat, ollama_embedding, ollama_generate, "
                        "openai_chat, openai_embedding, post_api_chat, yi_chat, zhipuai_chat, "
                        "zhipuai_embedding"));
}

TEST_CASE("config error: unknown model_type in JSON has a position too", "[models][config][errors]") {
  auto msg = error_of("[\n  {\"config_name\": \"gpt\",\n   \"model_type\": \"gpt\"}\n]", "m.json");
  CHECK_THAT(msg, Contains("m.json:3:18") && Contains("unknown model_type 'gpt'"));
}

TEST_CASE("config error: missing config_name", "[models][config][errors]") {
  auto msg = error_of("- model_type: echo\n");
  CHECK_THAT(msg, Contains("models.yaml:1:3") && Contains("model config #1") &&
                      Contains("missing required field 'config_name'"));
}

TEST_CASE("config error: missing model_type", "[models][config][errors]") {
  auto msg = error_of("- config_name: echo2\n- config_name: x\n");
  CHECK_THAT(msg, Contains("models.yaml:1:3") && Contains("'echo2'") &&
                      Contains("missing required field 'model_type'"));
}

TEST_CASE("config error: missing model_name for a type that needs one", "[models][config][errors]") {
  auto msg = error_of("- config_name: gpt\n  model_type: openai_chat\n");
  CHECK_THAT(msg, Contains("missing required field 'model_name'"));
}

TEST_CASE("config error: a field of the wrong type", "[models][config][errors]") {
  auto msg = error_of(
      "- config_name: gpt\n  model_type: openai_chat\n  model_name: m\n  client_args:\n    timeout: soon\n");
  CHECK_THAT(msg, Contains("models.yaml:5:14") && Contains("'client_args.timeout'") &&
                      Contains("positive number of seconds") && Contains("soon"));
}

TEST_CASE("config error: a negative max_retries", "[models][config][errors]") {
  auto msg = error_of(
      "- config_name: gpt\n  model_type: openai_chat\n  model_name: m\n  client_args: {max_retries: -1}\n");
  CHECK_THAT(msg, Contains("'client_args.max_retries'") && Contains("non-negative integer"));
}

TEST_CASE("config error: generate_args must be a mapping", "[models][config][errors]") {
  auto msg =
      error_of("- config_name: gpt\n  model_type: openai_chat\n  model_name: m\n  generate_args: [1]\n");
  CHECK_THAT(msg, Contains("models.yaml:4:18") && Contains("'generate_args' must be a mapping"));
}

TEST_CASE("config error: an unknown field suggests the right one", "[models][config][errors]") {
  auto msg = error_of("- config_name: gpt\n  model_type: openai_chat\n  model_name: m\n  genrate_args: {}\n");
  CHECK_THAT(msg, Contains("models.yaml:4:3") && Contains("unknown field 'genrate_args'") &&
                      Contains("did you mean 'generate_args'"));
}

TEST_CASE("config error: an unknown client_args field", "[models][config][errors]") {
  auto msg = error_of(
      "- config_name: gpt\n  model_type: openai_chat\n  model_name: m\n  client_args: {base_ur: x}\n");
  CHECK_THAT(msg, Contains("unknown field 'client_args.base_ur'") &&
                      Contains("did you mean 'client_args.base_url'"));
}

TEST_CASE("config error: a base_url that is not http(s)", "[models][config][errors]") {
  auto msg = error_of(
      "- config_name: gpt\n  model_type: openai_chat\n  model_name: m\n  client_args: {base_url: "
      "127.0.0.1:8000}\n");
  CHECK_THAT(msg, Contains("'client_args.base_url' must be an http:// or https:// URL"));
}

TEST_CASE("config error: post_api_chat without api_url", "[models][config][errors]") {
  auto msg = error_of("- config_name: p\n  model_type: post_api_chat\n");
  CHECK_THAT(msg, Contains("missing required field 'api_url'"));
}

TEST_CASE("config error: a missing environment variable is named", "[models][config][errors]") {
  unsetenv("AGENTD_TEST_MISSING_KEY");
  auto msg = error_of(
      "- config_name: gpt\n  model_type: openai_chat\n  model_name: m\n  api_key: "
      "${AGENTD_TEST_MISSING_KEY}\n");
  CHECK_THAT(msg, Contains("models.yaml:4:12") &&
                      Contains("environment variable AGENTD_TEST_MISSING_KEY is not set") &&
                      Contains("field 'api_key' of model config #1"));
}

TEST_CASE("config error: a missing environment variable in JSON", "[models][config][errors]") {
  unsetenv("AGENTD_TEST_MISSING_KEY");
  auto msg = error_of(
      "[{\"config_name\": \"gpt\", \"model_type\": \"openai_chat\",\n  \"model_name\": \"m\", \"api_key\": "
      "\"${AGENTD_TEST_MISSING_KEY}\"}]",
      "m.json");
  CHECK_THAT(msg, Contains("m.json:2:") && Contains("AGENTD_TEST_MISSING_KEY is not set"));
}

TEST_CASE("config error: a malformed ${...} reference", "[models][config][errors]") {
  auto msg =
      error_of("- config_name: gpt\n  model_type: openai_chat\n  model_name: m\n  api_key: ${BAD-NAME}\n");
  CHECK_THAT(msg, Contains("bad environment variable reference '${BAD-NAME}'"));
}

TEST_CASE("config error: duplicate config_name names both places", "[models][config][errors]") {
  auto msg = error_of("- config_name: a\n  model_type: echo\n- config_name: a\n  model_type: echo\n");
  CHECK_THAT(msg, Contains("models.yaml:3:3") && Contains("duplicate config_name 'a'") &&
                      Contains("first defined at models.yaml:1:3"));
}

TEST_CASE("config error: a duplicate key inside one config", "[models][config][errors]") {
  auto msg = error_of("- config_name: a\n  model_type: echo\n  config_name: b\n");
  CHECK_THAT(msg, Contains("models.yaml:3:3") && Contains("duplicate key 'config_name'"));
}

TEST_CASE("config error: the document is not a list of configs", "[models][config][errors]") {
  auto msg = error_of("just a string\n");
  CHECK_THAT(msg, Contains("expected a list of model configs"));
}

TEST_CASE("config error: a list item that is not a mapping", "[models][config][errors]") {
  auto msg = error_of("- config_name: a\n  model_type: echo\n- 42\n");
  CHECK_THAT(msg,
             Contains("models.yaml:3:3") && Contains("model config #2") && Contains("must be a mapping"));
}

TEST_CASE("config error: an unreadable file is named", "[models][config][errors]") {
  const std::string path = "/nonexistent/agentd/models.yaml";
  try {
    load_model_configs(path);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains(path) && Contains("No such file"));
  }
}

TEST_CASE("model_config_from_json validates a config built in code", "[models][config]") {
  auto c = model_config_from_json({{"config_name", "e"}, {"model_type", "echo"}, {"delay_ms", 5}}, "code");
  CHECK(c.extra["delay_ms"] == 5);
  try {
    model_config_from_json({{"config_name", "e"}, {"model_type", "nope"}}, "setModelConfigs");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Contains("setModelConfigs: model config 'e': unknown model_type 'nope'"));
  }
}

TEST_CASE("documents nested too deep are refused before yaml-cpp recurses into them",
          "[models][config][hostile]") {
  // The walks over a parsed document recurse once per level: 100,000 levels exhaust the stack or
  // memory (a crash of the server that received them through setModelConfigs).
  const std::string flow(100000, '[');
  CHECK(error_of(flow).find("models.yaml:1:65: nested deeper than 64 levels") != std::string::npos);
  CHECK(error_of(std::string(50000, '[') + std::string(50000, ']')).find("nested deeper") !=
        std::string::npos);  // balanced JSON: nlohmann reads it, yaml-cpp (positions) would not
  CHECK(error_of("- " + std::string(100000, '{')).find("nested deeper") != std::string::npos);
  std::string dashes;
  for (int i = 0; i < 5000; ++i) dashes += "- ";
  CHECK(error_of(dashes + "x").find("columns of indentation") != std::string::npos);
  // Brackets inside quoted scalars and comments are text, and 64 levels still parse.
  CHECK(error_of("- config_name: \"" + flow + "\"\n  model_type: echo  # " + flow + "\n") == "");
  CHECK(error_of("- config_name: 'it''s [[[" + std::string(100, '[') + "'\n  model_type: echo\n") == "");
  CHECK(error_of("- {config_name: e, model_type: echo, generate_args: {x: " + std::string(62, '[') +
                 std::string(62, ']') + "}}\n") == "");
  // A quote inside a plain scalar does not hide what follows it.
  CHECK(error_of("- a'\n- " + flow).find("nested deeper") != std::string::npos);
}

TEST_CASE("aliases expanding past a million values are refused", "[models][config][hostile]") {
  // "Billion laughs": each level refers to the one before nine times.
  std::string doc = "- config_name: e\n  model_type: echo\n  l0: &l0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 8; ++i) {
    doc += "  l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) doc += (j ? ", *l" : "*l") + std::to_string(i - 1);
    doc += "]\n";
  }
  CHECK(error_of(doc).find("more than 1000000 values once aliases") != std::string::npos);
}

TEST_CASE("a config holding bytes that are not UTF-8 gets a config_error, not a crash",
          "[models][config][hostile]") {
  // model_config_fuzz's crash-de0f83d4: describing the bad value in the message ran
  // nlohmann's dump(), which threw type_error 316 (invalid UTF-8) out of the parser.
  const std::string crash =
      "- &base\n 'config_nam[e: a\n  model_typscope_c$hat\n  model_name: \x91wen-ma  xpa\n"
      "i_kdel_type: echo\n";
  const std::string message = error_of(crash);
  CHECK_FALSE(message.empty());
  CHECK(error_of("- config_name: \"\\x91\"\n  model_type: [\"\xff\xfe\"]\n").find("model_type") !=
        std::string::npos);
}

TEST_CASE("an alias inside the node it refers to is refused, not followed forever",
          "[models][config][hostile]") {
  // model_config_fuzz's crash-9c23e123: "mode<<: *base" inside "&base" made a cycle, and the
  // conversion to a Value recursed until the stack overflowed.
  const std::string crash =
      "- &base\n  config_name: a\n  model_tipe: dashscope_chat\n  mode<<: *base\n  config_name: b\n"
      "- config_name: a\n  model_type: echo\n";
  CHECK(error_of(crash).find("levels once aliases (*name) are expanded") != std::string::npos);
}

TEST_CASE("config error: a key of more digits than an index holds is reported, not thrown",
          "[models][config][errors]") {
  // Found by model_config_fuzz: the field name was built with stoul, which threw out_of_range.
  auto msg = error_of("44444444444444444444444444: 1\n");
  CHECK_THAT(msg, Contains("models.yaml:1:"));
}
