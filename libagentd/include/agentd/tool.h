// agentd::Tools: the tools of the Model Context Protocol (MCP) servers configured on the hosting
// server (as_server --tool-config-path), as agents see them (Agent::tools()), and the types
// operators see them by (Client::tools(), Client::call_tool(), `agentctl tools`).
//
// A tool is named "SERVER/TOOL": the tool server's name in the config, then the tool's own name
// on it ("fs/read_file"). Patterns select tools by that name, with '*' matching any run of
// characters: "fs/*" (every tool of fs), "*/echo", "fs/read_file".
//
// Failures throw agentd::Error:
//   tool_error  the tool server failed: it could not start, died, answered garbage or too much,
//               or answered the JSON-RPC request with an error; an unknown tool (naming the
//               known ones). retryable() when a later try may succeed (the server died or is
//               restarting).
//   timeout     no answer within the call's timeout (the server is told to cancel the call).
// A tool that runs and reports a failure of its own is not an exception: its result has
// is_error set (the model is meant to read it and try something else).
#pragma once

#include <agentd/task.h>
#include <agentd/value.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentd {

// Calls of a tool, or of all the tools of a server, since the server started.
struct ToolUsage {
  std::uint64_t calls = 0;     // finished calls, failed ones included
  std::uint64_t failures = 0;  // thrown errors and results with is_error
  std::int64_t latency_us_total = 0;

  friend bool operator==(const ToolUsage&, const ToolUsage&) = default;
};

struct ToolInfo {
  std::string server;  // the tool server's name in the config ("fs")
  std::string name;    // the tool's name on that server ("read_file")
  std::string title;   // empty: none given
  std::string description;
  Value input_schema = Value::object();  // JSON Schema of its arguments
  Value output_schema;                   // null: none declared
  Value annotations;                     // null: none given (readOnlyHint, destructiveHint, ...)
  ToolUsage usage;                       // filled in for operators (Client::tools())

  std::string qualified_name() const { return server + "/" + name; }
  friend bool operator==(const ToolInfo&, const ToolInfo&) = default;
};

// What a tool answered (MCP's CallToolResult).
struct ToolResult {
  // The content blocks as the tool server sent them: {"type": "text", "text": ...}, "image" and
  // "audio" (base64 "data" and "mimeType"), "resource_link", "resource" (an embedded resource).
  Value content = Value::array();
  Value structured_content;  // null: none
  bool is_error = false;     // the tool ran and reports a failure (see above)

  // The text blocks joined by newlines; any other block as one line of JSON.
  std::string text() const;
  // {"content": [...], "isError": bool, "structuredContent": ... (when there is one)}.
  Value to_value() const;
  // The inverse of to_value() (any MCP CallToolResult). Throws Error(tool_error) for a value
  // that is not one (content not a list).
  static ToolResult from_value(const Value& v);

  friend bool operator==(const ToolResult&, const ToolResult&) = default;
};

struct ToolCallOptions {
  std::optional<std::chrono::milliseconds> timeout;  // the tool server's call_timeout otherwise
};

// One configured tool server as operators see it.
struct ToolServerInfo {
  std::string name;
  std::string transport;  // "stdio" or "http"
  // "idle" (not started yet: it starts at first use), "starting", "running", "restarting"
  // (it died; the next start is due), "failed" (it could not start or initialize; see error),
  // "stopped" (the server is stopping).
  std::string state;
  std::string error;             // why it failed or last died; empty when it never did
  std::string protocol_version;  // the MCP version agreed on ("2025-11-25"); empty before
  std::string server_name;       // what its initialize answer calls it (serverInfo.name)
  std::string server_version;
  std::uint32_t restarts = 0;   // times it was started again after dying
  std::vector<ToolInfo> tools;  // the tools it offers (the config's allow_tools applied)
  ToolUsage usage;              // all its tools together

  friend bool operator==(const ToolServerInfo&, const ToolServerInfo&) = default;
};

// A tool call made while an agent call ran: part of that call's TraceSpan (agentd/client.h).
struct ToolCallSpan {
  std::string tool;                // "SERVER/TOOL"
  std::int64_t start_unix_ns = 0;  // wall clock when the tool call was sent
  std::int64_t duration_ns = 0;
  std::string outcome;  // "ok", "is_error" (the tool reported a failure), or the error
                        // code's name ("tool_error", "timeout")
  std::string error_message;

  friend bool operator==(const ToolCallSpan&, const ToolCallSpan&) = default;
};

// The tools an agent reaches (Agent::tools()). Thread-safe; every tool server of the hosting
// server, started at first use when its config says so. Calls are recorded in the agent call's
// span (TraceSpan::tool_calls) and the server's metrics.
class Tools {
 public:
  virtual ~Tools() = default;

  // Blocking agents (on worker threads): wait for the answer while holding the thread. Calling
  // them on the server's event-loop thread (from an asynchronous agent) throws
  // Error(bad_request): use the _async forms there.

  // The tools whose qualified names match any of patterns (all when empty), sorted by name.
  // A tool server that cannot be started is left out (Client::tools() shows why).
  virtual std::vector<ToolInfo> list(const std::vector<std::string>& patterns = {}) = 0;
  // Calls "SERVER/TOOL" with arguments (a JSON object).
  virtual ToolResult call(const std::string& name, const Value& arguments = Value::object(),
                          const ToolCallOptions& options = ToolCallOptions()) = 0;

  // Asynchronous agents (agentd/task.h): the same, waiting without a thread:
  //   agentd::ToolResult r = co_await tools().call_async("fs/read_file", {{"path", p}});
  // Dropping the task before the answer cancels the call (the tool server is told).
  virtual Task<std::vector<ToolInfo>> list_async(std::vector<std::string> patterns = {}) = 0;
  virtual Task<ToolResult> call_async(std::string name, Value arguments = Value::object(),
                                      ToolCallOptions options = ToolCallOptions()) = 0;
};

// Whether "SERVER/TOOL" name matches pattern ('*' matches any run of characters, '/' included).
bool tool_name_matches(std::string_view pattern, std::string_view qualified_name);

// Chat model APIs name functions with [A-Za-z0-9_-], at most 64 characters: a tool's function
// name is "SERVER__TOOL" with any other character replaced by '_' (and cut to 64). Two tools
// whose names collide that way: the second gets a "_2" suffix in tool_definitions().
std::string tool_function_name(const ToolInfo& tool);

// OpenAI-style function definitions for ChatOptions::tools (agentd/model.h), one per tool:
// {"type": "function", "function": {"name": tool_function_name, "description", "parameters":
// input_schema}}. Every chat model type that supports tools converts these to its API.
Value tool_definitions(const std::vector<ToolInfo>& tools);

}  // namespace agentd
