// Tool server configs: the `mcpServers` map (Claude Desktop's, Cursor's, VS Code's spelling of
// the transport) plus agentd's keys, validated with a "FILE:LINE:COL: what, and what to do"
// message for each thing that can be wrong.
#include "tool_config.h"

#include <agentd/error.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "config_text.h"

namespace agentd::detail {
namespace {

[[noreturn]] void fail(std::string message) { throw Error(ErrorCode::config_error, std::move(message)); }

const std::vector<std::string_view> kServerKeys = {
    "type",    "command", "args",  "env",          "cwd",           "url",
    "headers", "tools",   "start", "call_timeout", "start_timeout", "max_message_bytes"};

std::string join(const std::vector<std::string_view>& items) {
  std::string out;
  for (auto item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

std::string describe(const Value& v) {
  std::string text = v.dump(-1, ' ', false, Value::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(v.type_name()) + " " + text;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// An HTTP header name is an RFC 9110 token.
bool valid_header_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
  });
}

// Reads the document's positions to place messages: each value and key by JSON pointer.
class Reader {
 public:
  Reader(std::string_view source, const PosMap& positions) : source_(source), positions_(positions) {}

  // "source:line:col" of the value at pointer (of its key when `key` and known), else of the
  // nearest enclosing value known.
  std::string where(std::string pointer, bool key = false) const {
    if (key) {
      if (auto it = positions_.keys.find(pointer); it != positions_.keys.end())
        return format_pos(source_, it->second);
    }
    for (;;) {
      if (auto it = positions_.values.find(pointer); it != positions_.values.end() && it->second.line > 0) {
        return format_pos(source_, it->second);
      }
      if (pointer.empty()) return format_pos(source_, Pos{});
      pointer.resize(pointer.rfind('/'));
    }
  }

  [[noreturn]] void fail_at(const std::string& pointer, bool key, const std::string& message) const {
    fail(where(pointer, key) + ": " + message);
  }

 private:
  std::string_view source_;
  const PosMap& positions_;
};

// Validates one entry of mcpServers.
class ServerReader {
 public:
  ServerReader(const Reader& reader, std::string name, const Value& raw)
      : reader_(reader),
        name_(std::move(name)),
        raw_(raw),
        pointer_("/mcpServers/" + pointer_escape(name_)) {}

  ToolServerConfig run() {
    ToolServerConfig c;
    c.name = name_;
    c.where = reader_.where(pointer_, /*key=*/true);
    if (!valid_name(name_)) {
      fail(c.where + ": tool server name '" + name_ +
           "' is not allowed: use 1 to 64 letters, digits, '_' or '-' (it prefixes its tools' names, "
           "as NAME__tool, for the models)");
    }
    if (!raw_.is_object()) {
      fail_at("", false,
              "must be a mapping (with command and args for a local server, or url for a remote one), got " +
                  describe(raw_));
    }
    for (const auto& [key, value] : raw_.items()) {
      if (std::find(kServerKeys.begin(), kServerKeys.end(), key) != kServerKeys.end()) continue;
      std::string hint;
      if (key == "transport" || key == "transportType") hint = " (the transport is chosen by 'type')";
      if (key == "disabled") hint = " (remove the entry, or comment it out, to disable a server)";
      if (key == "timeout") hint = " (agentd's timeouts are call_timeout and start_timeout, in seconds)";
      fail_at(key, true, "unknown key '" + key + "'" + hint + "; known keys: " + join(kServerKeys));
    }

    const bool has_command = present("command");
    const bool has_url = present("url");
    std::string type = optional_string("type");
    if (type == "sse") {
      fail_at("type", false,
              "type 'sse' is the legacy HTTP+SSE transport (MCP 2024-11-05), which agentd does not speak: "
              "use a server's Streamable HTTP endpoint (often its URL ending in /mcp rather than /sse) with "
              "type: http, or run the server locally over stdio with command and args");
    }
    if (type == "stdio") {
      c.transport = ToolServerConfig::Transport::stdio;
    } else if (type == "http" || type == "streamable-http" || type == "streamableHttp") {
      c.transport = ToolServerConfig::Transport::http;
    } else if (!type.empty()) {
      fail_at("type", false,
              "unknown type '" + type +
                  "': use stdio (a local command) or http (Streamable HTTP; also spelled "
                  "streamable-http)");
    } else if (has_command && has_url) {
      fail_at(
          "url", true,
          "has both command and url: keep command (with args) for a local server over stdio, or url for a "
          "remote one over Streamable HTTP");
    } else if (has_command) {
      c.transport = ToolServerConfig::Transport::stdio;
    } else if (has_url) {
      c.transport = ToolServerConfig::Transport::http;
    } else {
      fail_at("", false,
              "has neither command nor url: give command (and args) to run a local server over stdio, or url "
              "for a remote one over Streamable HTTP");
    }

    if (c.transport == ToolServerConfig::Transport::stdio) {
      for (const char* key : {"url", "headers"}) {
        if (present(key)) {
          fail_at(key, true,
                  std::string("'") + key + "' is for Streamable HTTP servers, and this one runs over stdio" +
                      (type.empty() ? " (it has a command)" : " (type: " + type + ")") + ": remove it");
        }
      }
      if (!has_command) fail_at("", false, "type " + type + " needs command: the program to run (and args)");
      std::string command = optional_string("command");
      if (command.empty()) fail_at("command", false, "command must not be empty: name the program to run");
      c.argv.push_back(command);
      for (auto& arg : string_list("args")) c.argv.push_back(std::move(arg));
      c.env = string_map("env", /*header=*/false);
      c.cwd = optional_string("cwd");
    } else {
      for (const char* key : {"command", "args", "env", "cwd"}) {
        if (present(key)) {
          fail_at(key, true,
                  std::string("'") + key + "' is for local servers run over stdio, and this one is reached " +
                      "over Streamable HTTP" + (type.empty() ? " (it has a url)" : " (type: " + type + ")") +
                      ": remove it");
        }
      }
      if (!has_url) fail_at("", false, "type " + type + " needs url: the server's Streamable HTTP endpoint");
      c.url = optional_string("url");
      const bool http = c.url.rfind("http://", 0) == 0 && c.url.size() > 7;
      const bool https = c.url.rfind("https://", 0) == 0 && c.url.size() > 8;
      if ((!http && !https) || c.url.find_first_of(" \t\r\n") != std::string::npos) {
        fail_at("url", false,
                "url must be an http:// or https:// URL (the server's Streamable HTTP endpoint), got \"" +
                    c.url + "\"");
      }
      c.headers = string_map("headers", /*header=*/true);
    }

    for (auto& pattern : string_list("tools")) {
      if (pattern.empty()) fail_at("tools", false, "tools must not hold an empty pattern");
      c.allow_tools.push_back(std::move(pattern));
    }
    std::string start = optional_string("start");
    if (start == "at_start") {
      c.start_at_launch = true;
    } else if (!start.empty() && start != "on_first_use") {
      fail_at("start", false,
              "start must be at_start (start it with as_server) or on_first_use (the default), got '" +
                  start + "'");
    }
    c.call_timeout = seconds("call_timeout", c.call_timeout);
    c.start_timeout = seconds("start_timeout", c.start_timeout);
    if (present("max_message_bytes")) {
      const Value& v = raw_["max_message_bytes"];
      constexpr double kMin = 1024, kMax = double(1u << 30);
      if (!v.is_number() || v.get<double>() != std::floor(v.get<double>()) || v.get<double>() < kMin ||
          v.get<double>() > kMax) {
        fail_at(
            "max_message_bytes", false,
            "max_message_bytes must be a whole number of bytes from 1024 to 1073741824 (default 16777216), "
            "got " +
                describe(v));
      }
      c.max_message_bytes = static_cast<std::size_t>(v.get<double>());
    }
    return c;
  }

 private:
  std::string ptr(std::string_view key) const {
    return key.empty() ? pointer_ : pointer_ + "/" + pointer_escape(key);
  }

  [[noreturn]] void fail_at(std::string_view key, bool at_key, const std::string& message) const {
    reader_.fail_at(ptr(key), at_key, "tool server '" + name_ + "': " + message);
  }

  // Present and not null (`env:` with nothing after it means no env).
  bool present(std::string_view key) const {
    auto it = raw_.find(key);
    return it != raw_.end() && !it->is_null();
  }

  std::string optional_string(std::string_view key) const {
    if (!present(key)) return {};
    const Value& v = raw_[std::string(key)];
    if (!v.is_string()) fail_at(key, false, std::string(key) + " must be a string, got " + describe(v));
    return v.get<std::string>();
  }

  std::vector<std::string> string_list(std::string_view key) const {
    std::vector<std::string> out;
    if (!present(key)) return out;
    const Value& v = raw_[std::string(key)];
    if (!v.is_array()) {
      fail_at(key, false, std::string(key) + " must be a list of strings, got " + describe(v));
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) {
        reader_.fail_at(ptr(key) + "/" + std::to_string(i), false,
                        "tool server '" + name_ + "': " + std::string(key) + "[" + std::to_string(i) +
                            "] must be a string, got " + describe(v[i]) +
                            " (quote it in YAML: \"8080\", \"true\")");
      }
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }

  std::vector<std::pair<std::string, std::string>> string_map(std::string_view key, bool header) const {
    std::vector<std::pair<std::string, std::string>> out;
    if (!present(key)) return out;
    const Value& v = raw_[std::string(key)];
    if (!v.is_object()) {
      fail_at(key, false, std::string(key) + " must be a mapping of names to strings, got " + describe(v));
    }
    for (const auto& [name, value] : v.items()) {
      const std::string at = ptr(key) + "/" + pointer_escape(name);
      const std::string who = "tool server '" + name_ + "': " + std::string(key) + "." + name;
      if (!value.is_string()) {
        reader_.fail_at(at, false, who + " must be a string, got " + describe(value) + " (quote it in YAML)");
      }
      const std::string text = value.get<std::string>();
      if (header) {
        if (!valid_header_name(name)) {
          reader_.fail_at(at, true,
                          who + ": not a valid HTTP header name (letters, digits and -_.!#$%&'*+^`|~)");
        }
        if (text.find_first_of("\r\n") != std::string::npos || text.find('\0') != std::string::npos) {
          reader_.fail_at(at, false, who + ": a header value must be one line (it holds a line break)");
        }
      } else if (name.empty() || name.find('=') != std::string::npos ||
                 name.find('\0') != std::string::npos) {
        reader_.fail_at(
            at, true, "tool server '" + name_ + "': env name '" + name + "' is not a variable name (no '=')");
      } else if (text.find('\0') != std::string::npos) {
        reader_.fail_at(at, false, who + " holds a NUL character");
      }
      out.emplace_back(name, text);
    }
    return out;
  }

  std::chrono::milliseconds seconds(std::string_view key, std::chrono::milliseconds fallback) const {
    if (!present(key)) return fallback;
    const Value& v = raw_[std::string(key)];
    // Up to a day: a longer "timeout" is a mistake (or a wish for none, which agentd does not offer).
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 86400) {
      fail_at(key, false,
              std::string(key) +
                  " must be a number of seconds above 0 and at most 86400 (such as 30 or 2.5), got " +
                  describe(v));
    }
    auto ms = static_cast<std::int64_t>(std::llround(v.get<double>() * 1000));
    return std::chrono::milliseconds(std::max<std::int64_t>(ms, 1));
  }

  const Reader& reader_;
  std::string name_;
  const Value& raw_;
  std::string pointer_;
};

// nlohmann keeps the last of two equal keys in a JSON object without a word; yaml-cpp (JSON is
// YAML) sees both. Best effort: text yaml-cpp cannot read is left to the JSON parser's verdict.
void refuse_duplicate_json_names(std::string_view text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception&) {
    return;
  }
  if (!root.IsMap()) return;
  for (auto top = root.begin(); top != root.end(); ++top) {
    if (!top->first.IsScalar() || top->first.Scalar() != "mcpServers" || !top->second.IsMap()) continue;
    std::set<std::string> seen;
    for (auto it = top->second.begin(); it != top->second.end(); ++it) {
      if (!it->first.IsScalar()) continue;
      if (!seen.insert(it->first.Scalar()).second) {
        const auto& mark = it->first.Mark();
        fail(format_pos(source, mark.is_null() ? Pos{} : Pos{mark.line + 1, mark.column + 1}) +
             ": duplicate tool server name '" + it->first.Scalar() + "' in mcpServers: rename or remove one");
      }
    }
  }
}

}  // namespace

bool ToolServerConfig::same_server(const ToolServerConfig& o) const {
  return name == o.name && transport == o.transport && argv == o.argv && env == o.env && cwd == o.cwd &&
         url == o.url && headers == o.headers && allow_tools == o.allow_tools &&
         start_at_launch == o.start_at_launch && call_timeout == o.call_timeout &&
         start_timeout == o.start_timeout && max_message_bytes == o.max_message_bytes;
}

ToolConfig parse_tool_config(std::string_view text, std::string_view source) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 BOM
  const std::string needs =
      "a tool config needs a top-level mcpServers mapping of server names to servers (see config/tools.yaml)";
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    fail(std::string(source) + ": the file is empty: " + needs);
  }
  PosMap positions;
  Value doc = read_config_document(text, source, positions);
  Reader reader(source, positions);
  if (!doc.is_object()) {
    reader.fail_at(
        "", false,
        (doc.is_null() ? std::string("the document is empty") : "expected a mapping, got " + describe(doc)) +
            ": " + needs);
  }
  for (const auto& [key, value] : doc.items()) {
    if (key == "mcpServers") continue;
    std::string hint;
    if (key == "servers") hint = " (VS Code's mcp.json spelling: rename it mcpServers)";
    if (key == "inputs") hint = " (VS Code's prompted inputs: use ${ENV} variables in strings instead)";
    reader.fail_at("/" + pointer_escape(key), true,
                   "unknown key '" + key + "'" + hint + "; the known top-level key is mcpServers");
  }
  if (!doc.contains("mcpServers")) reader.fail_at("", false, "no mcpServers key: " + needs);
  const Value& servers = doc["mcpServers"];
  if (servers.is_null()) return ToolConfig{std::string(source), {}};  // `mcpServers:` alone: none
  if (!servers.is_object()) {
    reader.fail_at("/mcpServers", false,
                   "mcpServers must be a mapping of server names to servers, got " + describe(servers));
  }
  if (text.find_first_not_of(" \t\r\n") != std::string_view::npos &&
      (text[text.find_first_not_of(" \t\r\n")] == '{')) {
    refuse_duplicate_json_names(text, source);
  }

  // nlohmann's object is sorted by key; the file's order is the order of the keys' positions.
  std::vector<std::pair<std::string, const Value*>> entries;
  for (const auto& [name, value] : servers.items()) entries.emplace_back(name, &value);
  auto pos_of = [&](const std::string& name) {
    auto it = positions.keys.find("/mcpServers/" + pointer_escape(name));
    return it == positions.keys.end() ? std::pair{0, 0} : std::pair{it->second.line, it->second.column};
  };
  std::stable_sort(entries.begin(), entries.end(),
                   [&](const auto& a, const auto& b) { return pos_of(a.first) < pos_of(b.first); });

  ToolConfig config;
  config.source = std::string(source);
  for (const auto& [name, value] : entries)
    config.servers.push_back(ServerReader(reader, name, *value).run());
  return config;
}

ToolConfig read_tool_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail("cannot read tool config file " + path + ": " + std::strerror(errno) +
         " (as_server --tool-config-path names a YAML or JSON file with mcpServers)");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("cannot read tool config file " + path);
  return parse_tool_config(buffer.str(), path);
}

}  // namespace agentd::detail
