// What agentd-gateway exposes, as its --config file says (YAML): named entries, each a fixed
// agent or "a new agent of class X per conversation". Parsing only (no I/O beyond reading the
// file), so every error path can be unit-tested and fuzzed; exposure.h puts the entries to work.
//
//   entries:
//     NAME:                      # [A-Za-z0-9][A-Za-z0-9._-]*, at most 64 characters: the /v1
//                                # `model` and the A2A base URL /a2a/NAME/
//       agent: ID                # a fixed agent on the upstream server(s), or:
//       class: CLASS             # a new agent of CLASS per conversation, with
//       args: {...}              #   its creation args (a mapping; default {})
//       idle-timeout: 600        #   seconds without a request before it is deleted (> 0)
//       max-conversations: 1000  #   live conversation agents at most (more: HTTP 429)
//       description: TEXT        # both kinds: the agent card's and /v1/models' description
//       skills:                  # both kinds: the agent card's skills
//         - {id: ID, name: NAME, description: TEXT, tags: [..], examples: [..]}
//
// config/gateway.yaml is a commented example.
#pragma once

#include <agentd/value.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <variant>
#include <vector>

namespace gateway {

struct SkillConfig {
  std::string id;
  std::string name;
  std::string description;
  std::vector<std::string> tags;
  std::vector<std::string> examples;
};

struct EntryConfig {
  std::string name;
  std::string agent;        // a fixed agent's id, or empty when:
  std::string agent_class;  // a new agent of this class per conversation
  agentd::Value args = agentd::Value::object();
  std::chrono::milliseconds idle_timeout{600'000};
  std::size_t max_conversations = 1000;
  std::string description;  // empty: none configured
  std::vector<SkillConfig> skills;
  std::string where;  // "FILE:LINE" of its name, for messages

  bool per_conversation() const { return !agent_class.empty(); }
};

struct ExposureConfig {
  std::string path;
  std::vector<EntryConfig> entries;  // in the file's order; names unique

  const EntryConfig* find(const std::string& name) const;
  // "a, b, c" (for messages naming what exists)
  std::string names() const;
};

// A config that cannot be used: "FILE:LINE:COLUMN: what is wrong; what to do".
struct ConfigError {
  std::string message;
};

// The file at path. A file that cannot be read is a ConfigError too.
std::variant<ExposureConfig, ConfigError> load_exposure_config(const std::string& path);
// The same from text; source names it in messages (the file's path).
std::variant<ExposureConfig, ConfigError> parse_exposure_config(const std::string& text,
                                                                const std::string& source);

// A skill as the A2A AgentSkill object (id, name, description, tags, examples when given).
agentd::Value skill_json(const SkillConfig& s);

}  // namespace gateway
