#include "dialog_agents.h"

#include <agentd/error.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <exception>
#include <limits>
#include <stdexcept>
#include <utility>

namespace agentd::dialog {
namespace {

std::string string_arg(const Value& args, const char* key, std::string fallback) {
  if (!args.is_object() || !args.contains(key) || args[key].is_null()) return fallback;
  if (!args[key].is_string()) throw Error(ErrorCode::bad_args, std::string(key) + " must be a string");
  return args[key].get<std::string>();
}

std::string as_text(const Value& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// --- built-in tools ------------------------------------------------------------------------

double number_arg(const Value& args, const char* key) {
  if (!args.is_object() || !args.contains(key) || !args[key].is_number())
    throw std::invalid_argument(std::string("argument '") + key + "' must be a number");
  return args[key].get<double>();
}

Value calculator(const Value& args) {
  const double a = number_arg(args, "a");
  const double b = number_arg(args, "b");
  const std::string op = args.value("op", std::string());
  double r = 0;
  if (op == "+")
    r = a + b;
  else if (op == "-")
    r = a - b;
  else if (op == "*")
    r = a * b;
  else if (op == "/") {
    if (b == 0) throw std::invalid_argument("division by zero");
    r = a / b;
  } else {
    throw std::invalid_argument("argument 'op' must be one of + - * / (got '" + op + "')");
  }
  // Whole numbers come back as integers ("42", not "42.0").
  if (std::isfinite(r) && r == std::floor(r) && std::fabs(r) < 9.0e15)
    return Value(static_cast<std::int64_t>(r));
  return Value(r);
}

Value current_time(const Value&) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return Value(std::string(buf));
}

Value echo_tool(const Value& args) {
  if (!args.is_object() || !args.contains("text") || !args["text"].is_string())
    throw std::invalid_argument("argument 'text' must be a string");
  return args["text"];
}

struct BuiltinTool {
  const char* name;
  const char* description;
  Value parameters;
  Value (*fn)(const Value&);
};

const std::vector<BuiltinTool>& builtin_tools() {
  static const std::vector<BuiltinTool> tools = {
      {"calculator", "Computes a op b for two numbers a and b and an operator op (+, -, * or /).",
       Value{{"type", "object"},
             {"properties",
              {{"a", {{"type", "number"}, {"description", "the left operand"}}},
               {"b", {{"type", "number"}, {"description", "the right operand"}}},
               {"op", {{"type", "string"}, {"enum", {"+", "-", "*", "/"}}}}}},
             {"required", {"a", "b", "op"}}},
       &calculator},
      {"current_time", "The current date and time in UTC, as ISO 8601 (2024-05-01T12:00:00Z).",
       Value{{"type", "object"}, {"properties", Value::object()}}, &current_time},
      {"echo", "Returns the given text unchanged.",
       Value{{"type", "object"}, {"properties", {{"text", {{"type", "string"}}}}}, {"required", {"text"}}},
       &echo_tool},
  };
  return tools;
}

}  // namespace

// --- ModelAgent ----------------------------------------------------------------------------

ModelAgent::ModelAgent(AgentInit init) : Agent(std::move(init)) {
  if (!args().is_null() && !args().is_object()) throw Error(ErrorCode::bad_args, "args must be an object");
  sys_prompt_ = string_arg(args(), "sys_prompt", "");
  model_config_name_ = string_arg(args(), "model_config_name", "echo");
  // A config the server does not have is refused now, not at the first call: the error names
  // the configs there are.
  (void)model(model_config_name_);
  register_method("usage", [this](const Value&) {
    return Value{{"calls", calls_},
                 {"prompt_tokens", usage_.prompt_tokens},
                 {"completion_tokens", usage_.completion_tokens},
                 {"total_tokens", usage_.total_tokens}};
  });
}

std::vector<Msg> ModelAgent::prompt() const {
  std::vector<Msg> out;
  if (!sys_prompt_.empty()) out.emplace_back("system", Value(sys_prompt_), "system");
  for (const Msg& m : memory().get()) {
    Msg p = m;
    if (m.name == name()) {
      p.role = m.role == "tool" ? "tool" : "assistant";
    } else {
      p.role = m.role == "system" ? "system" : "user";
      p.metadata = nullptr;  // another agent's tool calls are not ours to answer
    }
    out.push_back(std::move(p));
  }
  return out;
}

ChatResponse ModelAgent::ask_model(const std::vector<Msg>& messages, const ChatOptions& options,
                                   bool stream) {
  // Streamed only when the caller reads chunks: each piece the model sends becomes a chunk.
  ChatResponse r = stream && streaming()
                       ? model(model_config_name_)
                             ->stream(
                                 messages, [this](std::string_view piece) { emit_chunk(piece); }, options)
                       : model(model_config_name_)->chat(messages, options);
  ++calls_;
  usage_.prompt_tokens += r.usage.prompt_tokens;
  usage_.completion_tokens += r.usage.completion_tokens;
  usage_.total_tokens +=
      r.usage.total_tokens != 0 ? r.usage.total_tokens : r.usage.prompt_tokens + r.usage.completion_tokens;
  return r;
}

// --- DialogAgent ---------------------------------------------------------------------------

DialogAgent::DialogAgent(AgentInit init) : ModelAgent(std::move(init)) {}

Msg DialogAgent::reply(const Msg& x) {
  if (!is_empty(x)) memory().add(x);
  ChatResponse r = ask_model(prompt(), {}, /*stream=*/true);
  Msg out = std::move(r.msg);
  out.name = name();
  out.role = "assistant";
  memory().add(out);
  return out;
}

// --- ReActAgent ----------------------------------------------------------------------------

ReActAgent::ReActAgent(AgentInit init) : ModelAgent(std::move(init)) {
  if (args().is_object() && args().contains("max_iters")) {
    const Value& m = args()["max_iters"];
    if (!m.is_number_integer() || m.get<std::int64_t>() < 1 || m.get<std::int64_t>() > 1000)
      throw Error(ErrorCode::bad_args, "max_iters must be an integer from 1 to 1000");
    max_iters_ = m.get<int>();
  }
  std::vector<std::string> wanted = builtin_tool_names();
  if (args().is_object() && args().contains("tools")) {
    const Value& t = args()["tools"];
    if (!t.is_array()) throw Error(ErrorCode::bad_args, "tools must be a list of tool names");
    wanted.clear();
    for (const Value& n : t) {
      if (!n.is_string()) throw Error(ErrorCode::bad_args, "tools must be a list of tool names");
      wanted.push_back(n.get<std::string>());
    }
  }
  for (const auto& n : wanted) {
    if (n.find('/') != std::string::npos) {  // "SERVER/TOOL" or a pattern: an MCP tool
      mcp_patterns_.push_back(n);
      continue;
    }
    bool found = false;
    for (const auto& b : builtin_tools()) {
      if (n == b.name) {
        add_tool(b.name, b.description, b.parameters, b.fn);
        found = true;
      }
    }
    if (!found)
      throw Error(ErrorCode::bad_args, "no built-in tool named '" + n +
                                           "'; built-in tools: " + join(builtin_tool_names()) +
                                           "; MCP tools are named SERVER/TOOL (e.g. fs/read_file, fs/*)");
  }
  register_method("tools", [this](const Value&) {
    Value all = tool_definitions();
    for (auto& d : mcp_definitions()) all.push_back(std::move(d));
    return all;
  });
}

std::vector<std::string> ReActAgent::builtin_tool_names() {
  std::vector<std::string> out;
  for (const auto& b : builtin_tools()) out.emplace_back(b.name);
  std::sort(out.begin(), out.end());
  return out;
}

void ReActAgent::add_tool(std::string name, std::string description, Value parameters, ToolFn fn) {
  if (parameters.is_null()) parameters = Value{{"type", "object"}, {"properties", Value::object()}};
  tools_[std::move(name)] = Tool{std::move(description), std::move(parameters), std::move(fn)};
}

Value ReActAgent::tool_definitions() const {
  Value out = Value::array();
  for (const auto& [n, t] : tools_) {
    out.push_back(
        {{"type", "function"},
         {"function", {{"name", n}, {"description", t.description}, {"parameters", t.parameters}}}});
  }
  return out;
}

Value ReActAgent::mcp_definitions() {
  mcp_functions_.clear();
  missing_tools_.clear();
  if (mcp_patterns_.empty()) return Value::array();
  const std::vector<ToolInfo> found = tools()->list(mcp_patterns_);
  // A pattern that matches nothing now (its server down or restarting, a typo) leaves the model
  // without those tools for this reply, not the agent without an answer; the reply says which.
  for (const auto& p : mcp_patterns_) {
    if (std::none_of(found.begin(), found.end(),
                     [&](const ToolInfo& t) { return tool_name_matches(p, t.qualified_name()); }))
      missing_tools_.push_back(p);
  }
  Value defs = agentd::tool_definitions(found);
  for (std::size_t i = 0; i < found.size(); ++i)
    mcp_functions_[defs[i]["function"]["name"].get<std::string>()] = found[i].qualified_name();
  return defs;
}

std::string ReActAgent::run_tool(const std::string& tool_name, const Value& arguments) {
  if (auto m = mcp_functions_.find(tool_name); m != mcp_functions_.end()) {
    try {
      const ToolResult r = tools()->call(m->second, arguments.is_object() ? arguments : Value::object());
      return r.is_error ? "error: " + m->second + ": " + r.text() : r.text();
    } catch (const std::exception& e) {
      return "error: " + m->second + ": " + e.what();
    }
  }
  auto it = tools_.find(tool_name);
  if (it == tools_.end()) {
    std::vector<std::string> known;
    for (const auto& [n, _] : tools_) known.push_back(n);
    return "error: no tool named '" + tool_name +
           "'; known tools: " + (known.empty() ? "(none)" : join(known));
  }
  try {
    return as_text(it->second.fn(arguments));
  } catch (const std::exception& e) {
    return "error: " + tool_name + ": " + e.what();
  }
}

Msg ReActAgent::reply(const Msg& x) {
  if (!is_empty(x)) memory().add(x);
  ChatOptions options;
  options.tools = tool_definitions();
  // The MCP tools are listed again for each reply: tool servers may have changed them.
  for (auto& d : mcp_definitions()) options.tools.push_back(std::move(d));
  Value tool_results = Value::array();

  for (int iter = 1; iter <= max_iters_; ++iter) {
    ChatResponse r = ask_model(prompt(), options);
    Msg said = std::move(r.msg);
    said.name = name();
    said.role = "assistant";
    const Value calls = said.metadata.is_object() ? said.metadata.value("tool_calls", Value()) : Value();
    if (!calls.is_array() || calls.empty()) {  // a plain answer: done
      if (!said.metadata.is_object()) said.metadata = Value::object();
      said.metadata["iterations"] = iter;
      said.metadata["tool_results"] = tool_results;
      if (!missing_tools_.empty()) said.metadata["missing_tools"] = missing_tools_;
      memory().add(said);
      return said;
    }
    memory().add(said);
    for (const Value& call : calls) {
      const std::string id = call.value("id", std::string());
      const Value fn = call.value("function", Value::object());
      const std::string tool = fn.value("name", std::string());
      Value arguments = fn.value("arguments", Value::object());
      std::string result;
      if (arguments.is_string()) {  // OpenAI sends the arguments as JSON text
        const std::string text = arguments.get<std::string>();
        arguments = text.empty() ? Value::object() : Value::parse(text, nullptr, /*allow_exceptions=*/false);
        if (arguments.is_discarded()) {
          result = "error: the arguments of " + tool + " are not valid JSON: " + text;
          arguments = text;
        }
      }
      if (result.empty()) result = run_tool(tool, arguments);
      tool_results.push_back({{"id", id}, {"name", tool}, {"arguments", arguments}, {"result", result}});
      Msg answer(name(), Value(result), "tool");
      answer.metadata = {{"tool_call_id", id}, {"tool_name", tool}};
      memory().add(std::move(answer));
    }
  }

  std::string last;
  for (const auto& t : tool_results) {
    if (!last.empty()) last += "; ";
    last += t["name"].get<std::string>() + " -> " + t["result"].get<std::string>();
  }
  Msg out(
      name(),
      Value("I stopped without a final answer: the model still asked for tools after max_iters = " +
            std::to_string(max_iters_) + " calls. Tool results so far: " + (last.empty() ? "(none)" : last)),
      "assistant");
  out.metadata = {{"iterations", max_iters_}, {"tool_results", tool_results}, {"stopped", "max_iters"}};
  memory().add(out);
  return out;
}

}  // namespace agentd::dialog
