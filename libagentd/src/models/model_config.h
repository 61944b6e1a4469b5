// Model configs: what --model-config-path and setModelConfigs carry, parsed and validated.
//
// The format is AgentScope's: a list of configs (or one config) with the fields config_name,
// model_type, model_name, api_key, client_args, generate_args and type-specific ones, as YAML or
// as AgentScope's JSON model config files (unchanged). Every string value may use ${ENV_VAR}
// (or ${ENV_VAR:-default}; $${ is a literal ${) so secrets stay out of files.
//
// All functions here are pure (they read the environment and, for load_model_configs, one file)
// and safe to call from any thread.
#pragma once

#include <agentd/value.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {

// One validated model config. The typed fields below are filled in from `raw` for the config's
// model_type; fields a type does not use keep their defaults.
struct ModelConfig {
  std::string config_name;
  std::string model_type;
  std::string model_name;  // may be empty for echo and post_api_chat
  Value raw;               // the config object as written, after ${ENV} substitution

  std::string source;  // "file:line:column" where the config starts (for messages), or ""

  // --- shared by the HTTP model types ---
  std::string api_key;   // never printed; empty when not configured
  std::string base_url;  // client_args.base_url (openai/dashscope), host (ollama), api_url (post_api)
  std::chrono::milliseconds timeout{120'000};  // per attempt; idle time between bytes when streaming
  int max_retries = 3;                         // extra attempts on 429, 5xx, timeouts, connection failures
  std::chrono::milliseconds retry_initial_delay{500};
  std::chrono::milliseconds retry_max_delay{30'000};
  Value generate_args = Value::object();  // merged into every request (options may override)
  Value headers = Value::object();        // extra HTTP headers, name -> string value
  bool stream = false;                    // AgentScope's `stream`: chat() streams internally
  // Asynchronous calls (chat_async) of this config in flight at once per event loop; more wait
  // in FIFO order. Top-level field `max_concurrency`, a positive integer.
  int max_concurrency = 64;

  // --- type-specific ---
  Value extra = Value::object();  // ollama: options, keep_alive; post_api: json_args, messages_key,
                                  // response_path; echo: delay_ms
};

// The model types make_chat_model knows, sorted.
const std::vector<std::string>& known_model_types();

// "unknown model_type 'T'; valid model_types: ..." — or, for a type AgentScope has that agentd
// does not implement (image synthesis, multimodal, ...), "model_type 'T' is not supported by agentd
// (...); supported model_types: ...".
std::string unsupported_model_type_message(std::string_view type);

// Parses a model config document. `source_name` names it in messages (a file path, "setModelConfigs").
// Text whose first non-blank character is '[' or '{' is read as JSON, anything else as YAML.
// An empty document yields no configs.
//
// Throws agentd::Error(ErrorCode::config_error) with a message "source:line:column: ..." that names
// the bad field, lists the valid model_types for an unknown one, names a missing environment
// variable, and names both places of a duplicate config_name.
std::vector<ModelConfig> parse_model_configs(std::string_view text, std::string_view source_name);

// Reads and parses the file at `path`. An unreadable file throws config_error naming it.
std::vector<ModelConfig> load_model_configs(const std::string& path);

// Validates one config given as a JSON object (already ${ENV}-substituted), e.g. built in code.
// Messages name `source` instead of a line and column.
ModelConfig model_config_from_json(const Value& raw, std::string_view source);

}  // namespace agentd::detail
