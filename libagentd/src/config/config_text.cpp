// Config documents as text: YAML or JSON to a Value, with positions and ${ENV} substitution.
#include "config_text.h"

#include <agentd/error.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <optional>

namespace agentd::detail {

std::string pointer_escape(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_pos(std::string_view source, Pos pos) {
  std::string out(source);
  if (pos.line > 0) {
    out += ':' + std::to_string(pos.line) + ':' + std::to_string(pos.column);
  }
  return out;
}

namespace {

[[noreturn]] void fail(std::string message) { throw Error(ErrorCode::config_error, std::move(message)); }

Pos pos_of(const YAML::Mark& mark) {
  if (mark.is_null()) return {};
  return Pos{mark.line + 1, mark.column + 1};
}

// ---------------------------------------------------------------------------------------------
// Limits. nlohmann reads JSON nested to any depth, and the walks below (positions, ${ENV}
// substitution, YAML to Value) recurse once per level, each holding its JSON pointer: 100,000
// balanced brackets (200 KB) exhaust the stack or memory (yaml-cpp stops its own parser at
// 2,000 levels, not these walks). Aliases
// expand into copies (a "billion laughs" document is a few lines). Documents come from files
// and, over RPC, from setModelConfigs, so both are refused with a config_error first.

constexpr int kMaxNesting = 64;               // flow collections ([ {) inside each other
constexpr std::size_t kMaxIndent = 256;       // columns of block structure (spaces, "- ", "? ", ": ")
constexpr std::size_t kMaxNodes = 1'000'000;  // values in the document once aliases are expanded
constexpr int kMaxDepth =
    256;  // levels once aliases are expanded (an alias inside its own anchor never ends)

// Refuses text nested deeper than the limits allow, by a scan that needs no parser: flow depth
// outside quoted scalars and comments, and each line's leading block structure.
void check_nesting(std::string_view text, std::string_view source) {
  int depth = 0;
  std::size_t line = 1;
  bool line_start = true;
  std::size_t lead = 0;  // leading structure characters of the current line so far
  std::size_t line_begin = 0;
  auto here = [&](std::size_t i) {
    return format_pos(source, Pos{static_cast<int>(line), static_cast<int>(i - line_begin + 1)});
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      lead = 0;
      line_begin = i + 1;
      continue;
    }
    if (line_start) {
      if (c == ' ' || c == '\t' || c == '-' || c == '?' || c == ':') {
        if (++lead > kMaxIndent)
          fail(here(i) + ": nested deeper than a config can be (more than " + std::to_string(kMaxIndent) +
               " columns of indentation)");
        continue;
      }
      line_start = false;
    }
    if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;  // a comment, to the end of the line
    } else if ((c == '"' || c == '\'') &&
               (i == 0 || std::string_view(" \t\n[{,:-?").find(text[i - 1]) != std::string_view::npos)) {
      // A quoted scalar (one starts a token; a quote inside a plain scalar, "don't", is text):
      // skip to its closing quote ("" escapes with \, '' doubles the quote).
      for (++i; i < text.size(); ++i) {
        if (text[i] == '\n') {
          ++line;
          line_begin = i + 1;
        }
        if (c == '"' && text[i] == '\\') {
          ++i;
        } else if (text[i] == c) {
          if (c == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
            ++i;
          } else {
            break;
          }
        }
      }
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting)
        fail(here(i) + ": nested deeper than " + std::to_string(kMaxNesting) +
             " levels of [ ] and { }, more than a config needs");
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ${ENV} substitution.

// Replaces ${NAME} and ${NAME:-default} with the environment's values; "$${" stays a literal "${".
// `where` and `field` name the place in messages.
std::string substitute_env(std::string_view text, const std::string& where, const std::string& field) {
  if (text.find('$') == std::string_view::npos) return std::string(text);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "$${") == 0) {
      out += "${";
      i += 3;
      continue;
    }
    if (text.compare(i, 2, "${") != 0) {
      out += text[i++];
      continue;
    }
    std::size_t close = text.find('}', i + 2);
    if (close == std::string_view::npos) {
      fail(where + ": unterminated ${ in " + field);
    }
    std::string_view inner = text.substr(i + 2, close - i - 2);
    std::string_view name = inner;
    std::optional<std::string_view> fallback;
    if (auto dash = inner.find(":-"); dash != std::string_view::npos) {
      name = inner.substr(0, dash);
      fallback = inner.substr(dash + 2);
    }
    bool valid =
        !name.empty() && !(name[0] >= '0' && name[0] <= '9') &&
        std::all_of(name.begin(), name.end(), [](char c) {
          return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
        });
    if (!valid) {
      fail(where + ": bad environment variable reference '${" + std::string(inner) + "}' in " + field);
    }
    std::string name_str(name);
    const char* value = std::getenv(name_str.c_str());
    if (value != nullptr && (*value != '\0' || !fallback)) {
      out += value;
    } else if (fallback) {
      out += *fallback;
    } else {
      fail(where + ": environment variable " + name_str + " is not set (used by " + field + ")");
    }
    i = close + 1;
  }
  return out;
}

// "/0/client_args/timeout" -> "field 'client_args.timeout' of model config #1" (for messages).
std::string field_of(std::string_view pointer) {
  std::vector<std::string> parts;
  for (std::size_t start = 1; start <= pointer.size() && !pointer.empty();) {
    std::size_t slash = pointer.find('/', start);
    if (slash == std::string_view::npos) slash = pointer.size();
    parts.emplace_back(pointer.substr(start, slash - start));
    start = slash + 1;
  }
  std::string suffix;
  if (!parts.empty() && !parts[0].empty() &&
      std::all_of(parts[0].begin(), parts[0].end(), [](char c) { return c >= '0' && c <= '9'; })) {
    // The index can be any run of digits a document spells as a key; count it without stoul,
    // which throws on more digits than fit.
    std::string number = parts[0];
    if (number.size() < 10) number = std::to_string(std::stoul(number) + 1);
    suffix = "' of model config #" + number;
    parts.erase(parts.begin());
  }
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += '.';
    out += p;
  }
  return "field '" + out + suffix + (suffix.empty() ? "'" : "");
}

// ---------------------------------------------------------------------------------------------
// YAML -> Value, with positions and ${ENV} substitution.

// YAML 1.2 core schema resolution of a plain (unquoted) scalar.
Value resolve_plain_scalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  // Integers: decimal, 0x hex, 0o octal.
  {
    std::int64_t v = 0;
    const char* p = begin;
    int base = 10;
    bool negative = false;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
      base = s[1] == 'x' ? 16 : 8;
      p += 2;
    } else if (*p == '+' || *p == '-') {
      negative = *p == '-';
      ++p;
    }
    if (p != end) {
      auto [ptr, ec] = std::from_chars(p, end, v, base);
      if (ec == std::errc() && ptr == end) return negative ? -v : v;
    }
  }
  // Floats.
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf" || s == "+.INF") {
    return std::numeric_limits<double>::infinity();
  }
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return -std::numeric_limits<double>::infinity();
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  {
    bool looks_numeric = std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
    });
    if (looks_numeric && s.find_first_of("0123456789") != std::string::npos) {
      errno = 0;
      char* parsed_end = nullptr;
      double d = std::strtod(begin, &parsed_end);
      if (parsed_end == end && errno == 0) return d;
    }
  }
  return s;
}

class YamlReader {
 public:
  YamlReader(std::string_view source, PosMap& positions, bool substitute)
      : source_(source), positions_(positions), substitute_(substitute) {}

  Value convert(const YAML::Node& node, const std::string& pointer) {
    if (depth_ >= kMaxDepth)
      fail(format_pos(source_, pos_of(node.Mark())) + ": nested deeper than " + std::to_string(kMaxDepth) +
           " levels once aliases (*name) are expanded (does an alias refer to the node that holds it?)");
    ++depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    if (++nodes_ > kMaxNodes)
      fail(format_pos(source_, pos_of(node.Mark())) + ": more than " + std::to_string(kMaxNodes) +
           " values once aliases (*name) are expanded; a config needs far fewer");
    positions_.values.emplace(pointer, pos_of(node.Mark()));
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return nullptr;
      case YAML::NodeType::Scalar: {
        std::string text = node.Scalar();
        if (substitute_) {
          text = substitute_env(text, format_pos(source_, pos_of(node.Mark())), field_of(pointer));
        }
        // "?" marks a plain scalar; quoted scalars and explicitly tagged ones stay strings.
        if (node.Tag() == "?") return resolve_plain_scalar(text);
        return text;
      }
      case YAML::NodeType::Sequence: {
        Value out = Value::array();
        std::size_t i = 0;
        for (const auto& child : node) {
          out.push_back(convert(child, pointer + '/' + std::to_string(i++)));
        }
        return out;
      }
      case YAML::NodeType::Map: {
        Value out = Value::object();
        for (auto it = node.begin(); it != node.end(); ++it) {
          Pos key_pos = pos_of(it->first.Mark());
          if (!it->first.IsScalar()) {
            fail(format_pos(source_, key_pos) + ": a mapping key must be a plain string");
          }
          std::string key = it->first.Scalar();
          std::string child = pointer + '/' + pointer_escape(key);
          if (out.contains(key)) {
            fail(format_pos(source_, key_pos) + ": duplicate key '" + key + "'");
          }
          positions_.keys.emplace(child, key_pos);
          out[key] = convert(it->second, child);
        }
        return out;
      }
    }
    return nullptr;
  }

 private:
  std::string_view source_;
  PosMap& positions_;
  bool substitute_;
  std::size_t nodes_ = 0;  // converted so far (aliases count each time they are expanded)
  int depth_ = 0;          // of the node being converted
};

// Positions only (JSON documents): the same walk, values discarded. Best effort.
void collect_yaml_positions(std::string_view text, PosMap& positions) {
  try {
    YAML::Node root = YAML::Load(std::string(text));
    YamlReader reader("", positions, /*substitute=*/false);
    reader.convert(root, "");
  } catch (const std::exception&) {
    positions = PosMap{};  // not every JSON text is YAML that yaml-cpp reads; lose only positions
  }
}

// ${ENV} substitution over every string of a JSON document.
void substitute_env_in(Value& v, const std::string& pointer, std::string_view source,
                       const PosMap& positions) {
  if (v.is_string()) {
    auto it = positions.values.find(pointer);
    std::string where = format_pos(source, it == positions.values.end() ? Pos{} : it->second);
    v = substitute_env(v.get_ref<const std::string&>(), where, field_of(pointer));
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      substitute_env_in(v[i], pointer + '/' + std::to_string(i), source, positions);
    }
  } else if (v.is_object()) {
    for (auto& [key, child] : v.items()) {
      substitute_env_in(child, pointer + '/' + pointer_escape(key), source, positions);
    }
  }
}

Pos pos_from_offset(std::string_view text, std::size_t offset) {
  Pos p{1, 1};
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

}  // namespace

Value read_config_document(std::string_view text, std::string_view source_name, PosMap& positions) {
  check_nesting(text, source_name);
  std::size_t first = text.find_first_not_of(" \t\r\n");
  Value doc;
  if (first != std::string_view::npos && (text[first] == '[' || text[first] == '{')) {
    // AgentScope's JSON form: strict JSON for the values, yaml-cpp (JSON is YAML) for positions.
    try {
      doc = Value::parse(text);
    } catch (const Value::parse_error& e) {
      std::string what = e.what();
      if (auto p = what.find("syntax error"); p != std::string::npos) what = what.substr(p);
      fail(format_pos(source_name, pos_from_offset(text, e.byte == 0 ? 0 : e.byte - 1)) +
           ": invalid JSON: " + what);
    } catch (const Value::out_of_range& e) {
      // A number beyond what a double holds ("number overflow parsing '1e999'"): placed at the
      // number when it can be found in the text.
      std::string what = e.what();
      if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
      std::size_t at = 0;
      if (auto q = what.find('\''); q != std::string::npos) {
        auto literal = what.substr(q + 1, what.rfind('\'') - q - 1);
        if (auto found = text.find(literal); found != std::string_view::npos) at = found;
      }
      fail(format_pos(source_name, pos_from_offset(text, at)) + ": invalid JSON: " + what +
           " (write it as a string, or a smaller number)");
    }
    collect_yaml_positions(text, positions);
    substitute_env_in(doc, "", source_name, positions);
  } else {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      fail(format_pos(source_name, pos_of(e.mark)) + ": invalid YAML: " + e.msg);
    }
    doc = YamlReader(source_name, positions, /*substitute=*/true).convert(root, "");
  }
  return doc;
}

}  // namespace agentd::detail
