// Tool server configs: the mcpServers map as MCP servers' READMEs publish it (JSON and YAML),
// agentd's keys, and one case per error a bad config must report with its file, line and column.
#include "tool_config.h"
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <unistd.h>
#include <string>

using namespace agentd::test;
using agentd::detail::parse_tool_config;
using agentd::detail::read_tool_config;
using agentd::detail::ToolConfig;
using agentd::detail::ToolServerConfig;
using Catch::Matchers::Contains;

namespace {

// The config_error message parse_tool_config throws for `text`, or "" if it parsed.
std::string error_of(const std::string& text, const std::string& source = "tools.yaml") {
  try {
    parse_tool_config(text, source);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::config_error);
    return e.message();
  }
  return "";
}

}  // namespace

TEST_CASE("tool config: Claude Desktop's JSON as pasted from a README", "[tools][config]") {
  setenv("AGENTD_TEST_GH_TOKEN", "ghp-secret", 1);
  ToolConfig config = parse_tool_config(R"({
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "ghcr.io/github/github-mcp-server"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${AGENTD_TEST_GH_TOKEN}"}
    },
    "remote": {"type": "streamable-http", "url": "https://mcp.example.com/mcp",
               "headers": {"Authorization": "Bearer ${AGENTD_TEST_GH_TOKEN}"}}
  }
})",
                                        "claude.json");
  unsetenv("AGENTD_TEST_GH_TOKEN");
  CHECK(config.source == "claude.json");
  REQUIRE(config.servers.size() == 3);
  // The file's order, not the alphabetical order of a JSON object.
  const ToolServerConfig& fs = config.servers[0];
  CHECK(fs.name == "filesystem");
  CHECK(fs.transport == ToolServerConfig::Transport::stdio);
  CHECK(fs.argv ==
        std::vector<std::string>{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"});
  CHECK(fs.env.empty());
  CHECK(fs.where == "claude.json:3:5");
  CHECK(fs.call_timeout == std::chrono::seconds(60));
  CHECK(fs.start_timeout == std::chrono::seconds(30));
  CHECK(fs.max_message_bytes == 16u << 20);
  CHECK_FALSE(fs.start_at_launch);
  CHECK(fs.allow_tools.empty());
  const ToolServerConfig& gh = config.servers[1];
  CHECK(gh.name == "github");
  REQUIRE(gh.env.size() == 1);
  CHECK(gh.env[0] == std::pair<std::string, std::string>{"GITHUB_PERSONAL_ACCESS_TOKEN", "ghp-secret"});
  const ToolServerConfig& remote = config.servers[2];
  CHECK(remote.name == "remote");
  CHECK(remote.transport == ToolServerConfig::Transport::http);
  CHECK(remote.url == "https://mcp.example.com/mcp");
  REQUIRE(remote.headers.size() == 1);
  CHECK(remote.headers[0].second == "Bearer ghp-secret");
}

TEST_CASE("tool config: YAML with agentd's keys", "[tools][config]") {
  ToolConfig config = parse_tool_config(R"(
mcpServers:
  search:
    url: http://127.0.0.1:8080/mcp      # no type: a url means Streamable HTTP
    tools: [web_search, "fetch_*"]
    start: at_start
    call_timeout: 2.5
    start_timeout: 10
    max_message_bytes: 1048576
  local:
    type: stdio
    command: /usr/bin/python3
    args: [server.py, "8080"]
    env: {LOG_LEVEL: info}
    cwd: /srv
)",
                                        "tools.yaml");
  REQUIRE(config.servers.size() == 2);
  const ToolServerConfig& s = config.servers[0];
  CHECK(s.name == "search");
  CHECK(s.where == "tools.yaml:3:3");
  CHECK(s.transport == ToolServerConfig::Transport::http);
  CHECK(s.allow_tools == std::vector<std::string>{"web_search", "fetch_*"});
  CHECK(s.start_at_launch);
  CHECK(s.call_timeout == std::chrono::milliseconds(2500));
  CHECK(s.start_timeout == std::chrono::seconds(10));
  CHECK(s.max_message_bytes == 1048576);
  const ToolServerConfig& l = config.servers[1];
  CHECK(l.argv == std::vector<std::string>{"/usr/bin/python3", "server.py", "8080"});
  CHECK(l.cwd == "/srv");
  CHECK(l.env == std::vector<std::pair<std::string, std::string>>{{"LOG_LEVEL", "info"}});

  // same_server: everything but where.
  ToolConfig again =
      parse_tool_config("\n\n" + std::string("mcpServers:\n  search: {url: http://127.0.0.1:8080/mcp, "
                                             "tools: [web_search, \"fetch_*\"], start: at_start, "
                                             "call_timeout: 2.5, start_timeout: 10, "
                                             "max_message_bytes: 1048576}\n"),
                        "other.yaml");
  CHECK(again.servers[0].where != s.where);
  CHECK(again.servers[0].same_server(s));
  CHECK_FALSE(again.servers[0].same_server(l));
}

TEST_CASE("tool config: VS Code's and Cursor's type spellings", "[tools][config]") {
  for (const char* type : {"http", "streamable-http", "streamableHttp"}) {
    auto config = parse_tool_config(
        std::string("mcpServers:\n  a:\n    type: ") + type + "\n    url: http://h/mcp\n", "t");
    CHECK(config.servers[0].transport == ToolServerConfig::Transport::http);
  }
  CHECK(parse_tool_config("mcpServers:\n", "t").servers.empty());
  CHECK(parse_tool_config("{\"mcpServers\": {}}", "t").servers.empty());
}

TEST_CASE("tool config error: the legacy sse transport is refused with what to do",
          "[tools][config][errors]") {
  auto msg = error_of("mcpServers:\n  old:\n    type: sse\n    url: http://h/sse\n");
  CHECK_THAT(msg,
             Contains("tools.yaml:3:11: tool server 'old': type 'sse' is the legacy HTTP+SSE transport") &&
                 Contains("type: http"));
}

TEST_CASE("tool config error: unknown keys name the known ones", "[tools][config][errors]") {
  auto msg = error_of("mcpServers:\n  a:\n    command: x\n    enviroment: {A: b}\n");
  CHECK_THAT(msg, Contains("tools.yaml:4:5: tool server 'a': unknown key 'enviroment'") &&
                      Contains("known keys: type, command, args, env, cwd, url, headers, tools, start") &&
                      Contains("max_message_bytes"));
  msg = error_of("mcpServers: {}\nservers: {}\n");
  CHECK_THAT(msg, Contains("tools.yaml:2:1: unknown key 'servers'") && Contains("rename it mcpServers"));
  msg = error_of("mcpServers:\n  a:\n    command: x\n    disabled: true\n");
  CHECK_THAT(msg, Contains("tools.yaml:4:5") && Contains("unknown key 'disabled'"));
}

TEST_CASE("tool config error: command and url, neither, or keys of the other transport",
          "[tools][config][errors]") {
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    url: http://h\n"),
             Contains("tools.yaml:4:5: tool server 'a': has both command and url"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    args: [x]\n"),
             Contains("tools.yaml:3:5: tool server 'a': has neither command nor url"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    url: http://h/mcp\n    env: {A: b}\n"),
             Contains("tools.yaml:4:5") && Contains("'env' is for local servers run over stdio"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    headers: {A: b}\n"),
             Contains("tools.yaml:4:5") && Contains("'headers' is for Streamable HTTP servers"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    type: http\n    command: x\n"),
             Contains("tools.yaml:4:5") && Contains("'command' is for local servers"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    type: stdio\n"), Contains("type stdio needs command"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    type: websocket\n    url: ws://h\n"),
             Contains("tools.yaml:3:11") && Contains("unknown type 'websocket'"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: \"\"\n"), Contains("command must not be empty"));
}

TEST_CASE("tool config error: wrong types and values", "[tools][config][errors]") {
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    args: [--port, 8080]\n"),
             Contains("tools.yaml:4:20: tool server 'a': args[1] must be a string, got number 8080"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    args: --verbose\n"),
             Contains("tools.yaml:4:11") && Contains("args must be a list of strings"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    env: {DEBUG: true}\n"),
             Contains("tools.yaml:4:18") && Contains("env.DEBUG must be a string, got boolean true"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    url: ftp://h/mcp\n"),
             Contains("tools.yaml:3:10") && Contains("url must be an http:// or https:// URL"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    url: http://h\n    headers: {\"Bad Name\": x}\n"),
             Contains("tools.yaml:4:15") && Contains("not a valid HTTP header name"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    url: http://h\n    headers: {X-A: \"one\\ntwo\"}\n"),
             Contains("a header value must be one line"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    start: eagerly\n"),
             Contains("tools.yaml:4:12") && Contains("start must be at_start") && Contains("on_first_use"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    call_timeout: 0\n"),
             Contains("tools.yaml:4:19") && Contains("call_timeout must be a number of seconds above 0"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    start_timeout: 30s\n"),
             Contains("start_timeout must be a number of seconds") && Contains("string \"30s\""));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    max_message_bytes: 10\n"),
             Contains("max_message_bytes must be a whole number of bytes from 1024"));
  CHECK_THAT(error_of("mcpServers:\n  a:\n    command: x\n    tools: web_search\n"),
             Contains("tools must be a list of strings"));
  CHECK_THAT(error_of("mcpServers:\n  a: npx server\n"),
             Contains("tools.yaml:2:6: tool server 'a': must be a mapping"));
  CHECK_THAT(error_of("mcpServers: [a, b]\n"),
             Contains("tools.yaml:1:13: mcpServers must be a mapping of server names to servers"));
}

TEST_CASE("tool config error: bad and duplicate names", "[tools][config][errors]") {
  CHECK_THAT(error_of("mcpServers:\n  \"my server\":\n    command: x\n"),
             Contains("tools.yaml:2:3: tool server name 'my server' is not allowed"));
  CHECK_THAT(error_of("mcpServers:\n  " + std::string(65, 'a') + ":\n    command: x\n"),
             Contains("is not allowed: use 1 to 64"));
  CHECK_THAT(error_of("mcpServers:\n  a: {command: x}\n  a: {command: y}\n"),
             Contains("tools.yaml:3:3") && Contains("duplicate key 'a'"));
  CHECK_THAT(
      error_of("{\"mcpServers\": {\"a\": {\"command\": \"x\"},\n  \"a\": {\"command\": \"y\"}}}", "t.json"),
      Contains("t.json:2:3: duplicate tool server name 'a'"));
}

TEST_CASE("tool config error: empty, without mcpServers, bad syntax, missing ${VAR}",
          "[tools][config][errors]") {
  CHECK_THAT(error_of(""), Contains("tools.yaml: the file is empty") && Contains("mcpServers"));
  CHECK_THAT(error_of("# nothing yet\n"), Contains("the document is empty") && Contains("mcpServers"));
  CHECK_THAT(error_of("{}", "t.json"), Contains("t.json:1:1: no mcpServers key"));
  CHECK_THAT(error_of("- a\n- b\n"), Contains("tools.yaml:1:1: expected a mapping, got array"));
  CHECK_THAT(error_of("{\"mcpServers\": {\"a\": }}", "t.json"),
             Contains("t.json:1:") && Contains("invalid JSON"));
  CHECK_THAT(error_of("mcpServers:\n  a: [\n"), Contains("tools.yaml:") && Contains("invalid YAML"));
  unsetenv("AGENTD_TEST_MISSING_TOKEN");
  CHECK_THAT(error_of("mcpServers:\n  a:\n    url: http://h\n    headers: {Authorization: \"Bearer "
                      "${AGENTD_TEST_MISSING_TOKEN}\"}\n"),
             Contains("tools.yaml:4:") && Contains("AGENTD_TEST_MISSING_TOKEN is not set"));
}

TEST_CASE("tool config: read_tool_config reads a file and names one it cannot read", "[tools][config]") {
  CHECK_THROWS_WITH(read_tool_config("/nonexistent/tools.yaml"),
                    Contains("cannot read tool config file /nonexistent/tools.yaml"));
  const std::string path = "/tmp/agentd_tool_config_test_" + std::to_string(::getpid()) + ".yaml";
  {
    std::ofstream out(path);
    out << "mcpServers:\n  fs:\n    command: node\n    args: [server.js, /tmp]\n";
  }
  ToolConfig config = read_tool_config(path);
  std::remove(path.c_str());
  CHECK(config.source == path);
  REQUIRE(config.servers.size() == 1);
  CHECK(config.servers[0].where == path + ":2:3");
}

TEST_CASE("tool config: the example config/tools.yaml parses", "[tools][config]") {
  ToolConfig config = read_tool_config(AGENTD_SOURCE_DIR "/config/tools.yaml");
  REQUIRE_FALSE(config.servers.empty());
  CHECK(config.servers[0].transport == ToolServerConfig::Transport::stdio);
}
