// The value types of agentd/tool.h: results as values and text, names and patterns, the
// function definitions chat models take.
#include <agentd/error.h>
#include <agentd/tool.h>

#include <set>

namespace agentd {

std::string ToolResult::text() const {
  std::string out;
  if (!content.is_array()) return out;
  for (const Value& block : content) {
    if (!out.empty()) out += '\n';
    if (block.is_object() && block.value("type", std::string()) == "text" && block.contains("text") &&
        block["text"].is_string()) {
      out += block["text"].get<std::string>();
    } else {
      out += block.dump(-1, ' ', false, Value::error_handler_t::replace);
    }
  }
  return out;
}

Value ToolResult::to_value() const {
  Value out = {{"content", content.is_array() ? content : Value::array()}, {"isError", is_error}};
  if (!structured_content.is_null()) out["structuredContent"] = structured_content;
  return out;
}

ToolResult ToolResult::from_value(const Value& v) {
  if (!v.is_object())
    throw Error(ErrorCode::tool_error,
                "a tool result must be an object with a content list, not " + std::string(v.type_name()));
  ToolResult r;
  if (auto c = v.find("content"); c != v.end()) {
    if (!c->is_array())
      throw Error(ErrorCode::tool_error,
                  "a tool result's content must be a list of blocks, not " + std::string(c->type_name()));
    r.content = *c;
  }
  if (auto s = v.find("structuredContent"); s != v.end()) r.structured_content = *s;
  if (auto e = v.find("isError"); e != v.end() && e->is_boolean()) r.is_error = e->get<bool>();
  return r;
}

bool tool_name_matches(std::string_view pattern, std::string_view name) {
  // Glob with '*' only: the classic two-pointer match with backtracking to the last star.
  std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string tool_function_name(const ToolInfo& tool) {
  std::string out = tool.server + "__" + tool.name;
  for (char& c : out) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (out.size() > 64) out.resize(64);
  return out;
}

Value tool_definitions(const std::vector<ToolInfo>& tools) {
  Value out = Value::array();
  std::set<std::string> taken;
  for (const ToolInfo& t : tools) {
    std::string name = tool_function_name(t);
    if (!taken.insert(name).second) {
      for (int i = 2;; ++i) {
        std::string suffix = "_" + std::to_string(i);
        std::string candidate = name.substr(0, 64 - suffix.size()) + suffix;
        if (taken.insert(candidate).second) {
          name = std::move(candidate);
          break;
        }
      }
    }
    Value parameters = t.input_schema.is_object() ? t.input_schema : Value{{"type", "object"}};
    std::string description = t.description.empty() ? t.title : t.description;
    out.push_back({{"type", "function"},
                   {"function", {{"name", name}, {"description", description}, {"parameters", parameters}}}});
  }
  return out;
}

}  // namespace agentd
