// Built-in agents on models (AgentScope's DialogAgent and ReActAgent), shipped as the plugin
// libdialog_agents.so:
//
//   DialogAgent  args {"sys_prompt": "...", "model_config_name": "echo"}
//                Remembers the dialogue; each reply asks the model with
//                [system prompt] + memory + the new message and answers with what it says.
//                Called with AgentRef::reply_stream, it streams the model's answer as chunks.
//   ReActAgent   args {"sys_prompt": "...", "model_config_name": "echo", "max_iters": 10,
//                      "tools": ["calculator", "fs/*", ...]}   (default: every built-in tool)
//                "tools" names built-in tools, and MCP tools of the hosting server's tool
//                servers (as_server --tool-config-path) as SERVER/TOOL or patterns ("fs/*");
//                the model sees an MCP tool as the function SERVER__TOOL.
//                A reason-act loop over the model API's tool calls: the model asks for tools,
//                the agent runs them and sends the results back, until the model answers in
//                plain text or max_iters model calls have been made.
//
// Writing your own tools: subclass ReActAgent, call add_tool() in the constructor, register the
// subclass with AGENTD_REGISTER_AGENT, and build dialog_agents.cpp into your plugin:
//
//   class WeatherAgent : public agentd::dialog::ReActAgent {
//    public:
//     explicit WeatherAgent(agentd::AgentInit init) : ReActAgent(std::move(init)) {
//       add_tool("get_weather", "The weather in a city",
//                {{"type", "object"},
//                 {"properties", {{"city", {{"type", "string"}}}}},
//                 {"required", {"city"}}},
//                [](const agentd::Value& a) { return agentd::Value("sunny in " +
//                a.at("city").get<std::string>()); });
//     }
//   };
//   AGENTD_REGISTER_AGENT(WeatherAgent);
//
// Both agents run on worker threads and block while the model answers (see agentd/agent.h).
// Their methods: "usage" -> {"calls", "prompt_tokens", "completion_tokens", "total_tokens"} of
// this agent's model calls; ReActAgent also "tools" -> the tool definitions it sends.
#pragma once

#include <agentd/agent.h>
#include <agentd/model.h>
#include <agentd/msg.h>
#include <agentd/value.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace agentd::dialog {

// What the agents share: the args they both take, the prompt from memory, the usage tally.
class ModelAgent : public Agent {
 public:
  // Throws Error(bad_args) when sys_prompt or model_config_name is not a string, and
  // Error(config_error) naming the server's model configs when model_config_name is none of them.
  explicit ModelAgent(AgentInit init);

  const std::string& sys_prompt() const { return sys_prompt_; }
  const std::string& model_config_name() const { return model_config_name_; }

 protected:
  // The messages for one model call: the system prompt (if any), then memory() as the model
  // should see it: this agent's own messages as "assistant" (or "tool" for tool results),
  // everyone else's as "user" ("system" stays "system").
  std::vector<Msg> prompt() const;

  // Calls the configured model (Agent::model(model_config_name())) and tallies its usage.
  // stream: when the caller reads chunks (streaming()), the model's answer is streamed and each
  // piece emitted as a chunk (emit_chunk); otherwise a plain chat() call.
  // Errors (an unknown config, a failed HTTP call) propagate as agentd::Error.
  ChatResponse ask_model(const std::vector<Msg>& messages, const ChatOptions& options = {},
                         bool stream = false);

  // True for the empty message the host passes to reply() without input.
  static bool is_empty(const Msg& x) { return x.content.is_null() && x.name.empty(); }

 private:
  std::string sys_prompt_;
  std::string model_config_name_;
  Usage usage_;
  std::int64_t calls_ = 0;
};

class DialogAgent : public ModelAgent {
 public:
  explicit DialogAgent(AgentInit init);
  // Adds x to memory, asks the model, adds its answer (named after this agent) and returns it.
  Msg reply(const Msg& x) override;
};

class ReActAgent : public ModelAgent {
 public:
  using ToolFn = std::function<Value(const Value& arguments)>;

  // Throws Error(bad_args) for a max_iters below 1 or an unknown tool name in "tools".
  explicit ReActAgent(AgentInit init);

  // Runs the loop described at the top of this file. The answer's metadata carries
  // "iterations" (model calls made), "tool_results" ([{"id", "name", "arguments", "result"}])
  // and, when the bound was hit, "stopped": "max_iters".
  Msg reply(const Msg& x) override;

  // The built-in tools' names, sorted: what args.tools may list.
  static std::vector<std::string> builtin_tool_names();

  // The tool definitions sent to the model, in OpenAI's shape
  // [{"type": "function", "function": {"name", "description", "parameters"}}], sorted by name.
  Value tool_definitions() const;

  int max_iters() const { return max_iters_; }

 protected:
  // Adds (or replaces) a tool. `parameters` is the JSON schema of its arguments object. fn runs on
  // this agent's worker thread; what it returns (text, or JSON) goes back to the model; what it
  // throws goes back as "error: <what>" so the model can correct itself.
  void add_tool(std::string name, std::string description, Value parameters, ToolFn fn);

  // Runs one requested tool (a built-in one, one added with add_tool, or an MCP tool by its
  // function name). Never throws: failures become "error: ..." text for the model.
  virtual std::string run_tool(const std::string& tool_name, const Value& arguments);

  // The definitions of the MCP tools args.tools names (SERVER/TOOL patterns), listed now from
  // the hosting server's tool servers (agentd/tool.h), and remembers their function names for
  // run_tool. A pattern that matches no tool now (its server is down, or a typo) is left out and
  // named in the final answer's metadata["missing_tools"].
  Value mcp_definitions();

 private:
  struct Tool {
    std::string description;
    Value parameters;
    ToolFn fn;
  };
  int max_iters_ = 10;
  std::map<std::string, Tool, std::less<>> tools_;
  std::vector<std::string> mcp_patterns_;             // args.tools entries with a '/'
  std::map<std::string, std::string> mcp_functions_;  // function name -> "SERVER/TOOL"
  std::vector<std::string> missing_tools_;            // patterns that matched no tool this reply
};

}  // namespace agentd::dialog
