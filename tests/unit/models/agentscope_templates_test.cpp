// AgentScope's model config templates (tests/unit/models/agentscope_templates/, in AgentScope's own
// JSON form and field names) load unchanged, get each provider's default base URL, and build a
// model without any I/O; a type agentd does not implement is refused, naming it.
#include "chat_models.h"
#include "model_config.h"
#include "model_registry.h"
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <map>
#include <string>

using namespace agentd::test;
using agentd::detail::load_model_configs;
using agentd::detail::parse_model_configs;

namespace {
std::string template_path(const std::string& name) {
  return std::string(AGENTD_SOURCE_DIR) + "/tests/unit/models/agentscope_templates/" + name + ".json";
}
}  // namespace

TEST_CASE("AgentScope's templates for every chat and embedding type load unchanged", "[models][config]") {
  const std::map<std::string, std::string> default_urls = {
      {"anthropic_chat", "https://api.anthropic.com"},
      {"gemini_chat", "https://generativelanguage.googleapis.com/v1beta"},
      {"zhipuai_chat", "https://open.bigmodel.cn/api/paas/v4"},
      {"yi_chat", "https://api.lingyiwanwu.com/v1"},
      {"litellm_chat", "http://localhost:4000"},
      {"ollama_generate", "http://localhost:11434"},
      {"openai_embedding", "https://api.openai.com/v1"},
      {"ollama_embedding", "http://localhost:11434"},
      {"dashscope_text_embedding", "https://dashscope.aliyuncs.com/api/v1"},
      {"gemini_embedding", "https://generativelanguage.googleapis.com/v1beta"},
      {"zhipuai_embedding", "https://open.bigmodel.cn/api/paas/v4"},
  };
  for (const auto& [type, url] : default_urls) {
    INFO(type);
    auto configs = load_model_configs(template_path(type));
    REQUIRE_FALSE(configs.empty());
    for (const auto& c : configs) {
      CHECK(c.model_type == type);
      CHECK(c.base_url == url);
      auto model = agentd::detail::make_chat_model(c);  // no connection at load time
      CHECK(model->model_type() == type);
    }
  }
  auto yi = load_model_configs(template_path("yi_chat"));
  CHECK(yi[0].generate_args == Value{{"temperature", 0.3}, {"top_p", 0.9}, {"max_tokens", 1000}});
  CHECK(yi[0].api_key == "{your_api_key}");
  auto gen = load_model_configs(template_path("ollama_generate"));
  CHECK(gen[0].extra["options"] == Value{{"temperature", 0.7}});
  CHECK(gen[0].extra["keep_alive"] == "5m");
  CHECK(load_model_configs(template_path("openai_embedding"))[0].max_retries == 3);
}

TEST_CASE("client_args.base_url overrides a provider's default", "[models][config]") {
  for (const char* type : {"zhipuai_chat", "yi_chat", "litellm_chat", "anthropic_chat", "gemini_chat",
                           "zhipuai_embedding", "gemini_embedding"}) {
    INFO(type);
    auto c = parse_model_configs(std::string("- {config_name: m, model_type: ") + type +
                                     ", model_name: x, client_args: {base_url: \"http://proxy:4000/\"}}\n",
                                 "t.yaml");
    CHECK(c[0].base_url == "http://proxy:4000");
  }
}

TEST_CASE("a type agentd does not implement is refused, naming it and listing the supported ones",
          "[models][config][errors]") {
  try {
    load_model_configs(template_path("post_api_dall_e"));
    FAIL("expected a config_error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains("post_api_dall_e.json:3:") && Contains("model_type 'post_api_dall_e'") &&
                                Contains("image synthesis") && Contains("not supported by agentd") &&
                                Contains("anthropic_chat") && Contains("zhipuai_embedding"));
  }
  agentd::detail::ModelConfig c;
  c.config_name = "img";
  c.model_type = "openai_dall_e";
  CHECK_THROWS_WITH(
      agentd::detail::make_chat_model(c),
      Contains("model config 'img'") && Contains("'openai_dall_e' (image synthesis) is not supported"));
}

TEST_CASE("yi_chat's top-level sampling fields must be numbers, and generate_args wins",
          "[models][config][errors]") {
  auto c = parse_model_configs(
      "- {config_name: y, model_type: yi_chat, model_name: yi, temperature: 0.3, "
      "generate_args: {temperature: 0.9}}\n",
      "t.yaml");
  CHECK(c[0].generate_args["temperature"] == 0.9);
  CHECK_THROWS_WITH(
      parse_model_configs("- {config_name: y, model_type: yi_chat, model_name: yi, top_p: high}\n", "t.yaml"),
      Contains("field 'top_p' must be a number"));
}
