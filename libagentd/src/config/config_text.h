// Config documents as text (model configs, tool configs): YAML or JSON (AgentScope's model
// configs) read into a Value, with ${ENV} substitution and the line and column of every key and value for
// messages. Pure functions; any thread.
#pragma once

#include <agentd/value.h>

#include <string>
#include <string_view>
#include <unordered_map>

namespace agentd::detail {

struct Pos {
  int line = -1;  // 1-based; -1 when unknown
  int column = -1;
};

// Positions of values and of keys, by JSON pointer ("/0/client_args/timeout"). Best effort: a
// pointer missing from the map just makes a message without line and column.
struct PosMap {
  std::unordered_map<std::string, Pos> values;
  std::unordered_map<std::string, Pos> keys;
};

// A JSON pointer's escaping of one key ("~" -> "~0", "/" -> "~1").
std::string pointer_escape(std::string_view key);

// "source:line:column", or just "source" when the position is unknown.
std::string format_pos(std::string_view source, Pos pos);

// Reads a non-empty document: JSON when its first non-blank character is '[' or '{', YAML
// otherwise; every string has had ${ENV} substituted; `positions` is filled in. Throws
// Error(config_error) "source:line:column: ..." on a syntax error or a missing variable.
Value read_config_document(std::string_view text, std::string_view source_name, PosMap& positions);

}  // namespace agentd::detail
