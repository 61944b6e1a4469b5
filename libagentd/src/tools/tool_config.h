// Tool server configs (as_server --tool-config-path): the `mcpServers` map MCP servers' READMEs
// publish for their users to paste, plus agentd's own keys per server. Pure; any thread.
//
//   mcpServers:
//     fs:                                   # stdio: the server is a child process
//       command: node_modules/.bin/mcp-server-filesystem
//       args: [/srv/docs]
//       env: {LOG_LEVEL: info, API_KEY: ${FS_API_KEY}}   # its whole environment (plus PATH)
//       cwd: /srv
//     search:                               # Streamable HTTP
//       url: https://mcp.example.com/mcp
//       headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
//       # agentd's keys (any server):
//       tools: [web_search, "fetch_*"]     # the tools to expose (patterns on the tool's own name)
//       start: at_start                     # or on_first_use (the default)
//       call_timeout: 60                    # seconds per tools/call
//       start_timeout: 30                   # seconds to start and initialize
//       max_message_bytes: 16777216         # the largest message it may send
//
// "type" may say stdio, http or streamable-http (VS Code's and Cursor's spelling); without it, a
// `command` means stdio and a `url` means Streamable HTTP. The legacy HTTP+SSE transport ("sse")
// is refused with a message saying so. Every string has had ${ENV} substituted (a missing
// variable is an error), as in model configs.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentd::detail {

struct ToolServerConfig {
  std::string name;  // the key under mcpServers; [A-Za-z0-9_-], 1..64 characters
  enum class Transport { stdio, http };
  Transport transport = Transport::stdio;

  // stdio
  std::vector<std::string> argv;                         // command, then args
  std::vector<std::pair<std::string, std::string>> env;  // the child's environment (PATH added
                                                         // when missing: /usr/local/bin:/usr/bin:/bin)
  std::string cwd;                                       // empty: as_server's working directory

  // http
  std::string url;                                           // http:// or https://
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every request

  // agentd's keys
  std::vector<std::string> allow_tools;  // patterns on the tool's own name ('*'); empty: all
  bool start_at_launch = false;          // start: at_start
  std::chrono::milliseconds call_timeout{60'000};
  std::chrono::milliseconds start_timeout{30'000};
  std::size_t max_message_bytes = 16u << 20;

  std::string where;  // "FILE:LINE:COL" of its entry, for messages

  // Whether the two describe the same server process (everything but `where`).
  bool same_server(const ToolServerConfig& other) const;
};

struct ToolConfig {
  std::string source;                     // the file it was read from
  std::vector<ToolServerConfig> servers;  // in the file's order
};

// Parses a document (YAML or JSON: config_text.h). Throws Error(config_error)
// "source:line:col: what was wrong, and what to do" for a syntax error, a missing ${VAR}, an
// unknown key, a wrong type, a server with neither command nor url (or both), a bad name, a
// duplicate name. An empty document, or one without mcpServers, is an error too (it names the
// key the file needs).
ToolConfig parse_tool_config(std::string_view text, std::string_view source);

// Reads and parses the file; Error(config_error) also when it cannot be read.
ToolConfig read_tool_config(const std::string& path);

}  // namespace agentd::detail
