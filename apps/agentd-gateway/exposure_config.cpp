#include "exposure_config.h"

#include <agentd/value_limits.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace gateway {

namespace {

constexpr std::size_t kMaxNameLength = 64;
constexpr double kMaxIdleSeconds = 30.0 * 24 * 3600;  // 30 days
constexpr std::size_t kMaxConversations = 1'000'000;
// args are copied into a Value: bounded, so a document of aliases cannot expand without end.
constexpr int kMaxArgsDepth = 64;
constexpr std::size_t kMaxArgsNodes = 100'000;

const char* const kEntryKeys = "agent, class, args, idle-timeout, max-conversations, description, skills";
const char* const kSkillKeys = "id, name, description, tags, examples";

// Thrown inside the parser only; parse_exposure_config returns it as a ConfigError.
struct Fail {
  std::string message;
};

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  std::string at(const YAML::Node& n) const {
    const YAML::Mark m = n.Mark();
    if (m.is_null()) return source_;
    return source_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    throw Fail{at(n) + ": " + what};
  }

  ExposureConfig parse(const YAML::Node& root) {
    ExposureConfig out;
    out.path = source_;
    if (!root.IsDefined() || root.IsNull())
      throw Fail{source_ +
                 ": the file is empty; it needs 'entries:', a mapping of entry names to entries "
                 "(see config/gateway.yaml)"};
    if (!root.IsMap()) fail(root, "expected a mapping with the key 'entries' (see config/gateway.yaml)");
    std::optional<YAML::Node> found;  // (YAML::Node's assignment writes through: not reassigned)
    for (const auto& kv : root) {
      const std::string key = scalar_key(kv.first);
      if (key != "entries")
        fail(kv.first,
             "unknown key '" + key + "'; the file has one key, 'entries' (a mapping of names to entries)");
      if (found) fail(kv.first, "'entries' is given twice");
      found.emplace(kv.second);
    }
    if (!found)
      fail(root,
           "no 'entries': name at least one entry (entries: {NAME: {agent: ID}} or {NAME: {class: CLASS}})");
    const YAML::Node& entries = *found;
    if (entries.IsNull() || (entries.IsMap() && entries.size() == 0))
      fail(entries,
           "'entries' is empty: name at least one entry (NAME: {agent: ID} or NAME: {class: CLASS})");
    if (!entries.IsMap())
      fail(entries,
           "'entries' must be a mapping of entry names to entries (NAME: {agent: ID} or NAME: {class: "
           "CLASS})");
    std::set<std::string> names;
    for (const auto& kv : entries) {
      EntryConfig e = entry(kv.first, kv.second);
      if (!names.insert(e.name).second)
        fail(kv.first, "entry '" + e.name + "' is named twice; entry names must be unique");
      out.entries.push_back(std::move(e));
    }
    return out;
  }

 private:
  // A scalar's text, refused unless UTF-8. The file as a whole is checked before parsing, but
  // YAML's reader can still turn what it holds (a NUL, other control characters) into bytes that
  // are not; they would end up in JSON (agent cards, skills) that cannot be written.
  const std::string& text(const YAML::Node& n, const std::string& what) const {
    const std::string& s = n.Scalar();
    if (auto why = agentd::utf8_problem(s); !why.empty())
      fail(n, what + " is not UTF-8 text (" + why + "); the file may hold control characters such as NUL");
    return s;
  }

  std::string scalar_key(const YAML::Node& k) const {
    if (!k.IsScalar()) fail(k, "a key must be a plain name, not a list or mapping");
    return text(k, "a key");
  }

  std::string string_value(const YAML::Node& v, const std::string& what) const {
    if (!v.IsScalar()) fail(v, what + " must be a string");
    return text(v, what);
  }

  std::string nonempty_string(const YAML::Node& v, const std::string& what) const {
    std::string s = string_value(v, what);
    if (s.empty()) fail(v, what + " must not be empty");
    return s;
  }

  std::vector<std::string> strings(const YAML::Node& v, const std::string& what) const {
    std::vector<std::string> out;
    if (v.IsNull()) return out;
    if (!v.IsSequence()) fail(v, what + " must be a list of strings ([a, b])");
    for (const auto& item : v) out.push_back(string_value(item, what + " items"));
    return out;
  }

  double number(const YAML::Node& v, const std::string& what) const {
    if (v.IsScalar() && v.Tag() != "!") {
      const std::string& s = v.Scalar();
      errno = 0;
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0 && std::isfinite(d)) return d;
    }
    fail(v, what + " must be a number");
  }

  static void check_name(const std::string& name, const Parser& p, const YAML::Node& at) {
    auto word = [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    };
    bool ok = !name.empty() && name.size() <= kMaxNameLength && word(name[0]);
    for (char c : name) ok = ok && (word(c) || c == '.' || c == '_' || c == '-');
    if (!ok)
      p.fail(at, "bad entry name '" + name +
                     "': a name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit "
                     "(it is the /v1 model and the A2A path /a2a/NAME/)");
  }

  EntryConfig entry(const YAML::Node& key, const YAML::Node& body) {
    EntryConfig e;
    e.name = scalar_key(key);
    check_name(e.name, *this, key);
    e.where = source_ + ":" + std::to_string(key.Mark().line + 1);
    const std::string what = "entry '" + e.name + "'";
    if (!body.IsMap())
      fail(body.IsNull() ? key : body,
           what +
               " must be a mapping with 'agent: ID' (a fixed agent) or 'class: CLASS' (a new agent per "
               "conversation)");
    std::set<std::string> seen;
    std::optional<YAML::Node> agent_key;
    std::optional<YAML::Node> class_key;
    std::vector<YAML::Node> class_only;  // keys that need class:
    for (const auto& kv : body) {
      const std::string k = scalar_key(kv.first);
      if (!seen.insert(k).second) fail(kv.first, what + ": '" + k + "' is given twice");
      const YAML::Node& v = kv.second;
      if (k == "agent") {
        e.agent = nonempty_string(v, what + ": 'agent' (an agent id on the server)");
        agent_key.emplace(kv.first);
      } else if (k == "class") {
        e.agent_class = nonempty_string(v, what + ": 'class' (an agent class the server knows)");
        class_key.emplace(kv.first);
      } else if (k == "args") {
        if (!v.IsNull() && !v.IsMap())
          fail(v, what + ": 'args' must be a mapping (the creation args of each conversation's agent)");
        std::size_t nodes = 0;
        e.args = v.IsNull() ? agentd::Value::object() : to_value(v, 0, nodes);
        class_only.push_back(kv.first);
      } else if (k == "idle-timeout") {
        const double s = number(v, what + ": 'idle-timeout' (seconds)");
        if (!(s > 0) || s > kMaxIdleSeconds)
          fail(v, what + ": 'idle-timeout' must be above 0 and at most 30 days (2592000 seconds)");
        e.idle_timeout = std::chrono::milliseconds(std::max<long long>(1, std::llround(s * 1000)));
        class_only.push_back(kv.first);
      } else if (k == "max-conversations") {
        std::size_t n = 0;
        const std::string s = v.IsScalar() ? v.Scalar() : std::string();
        auto r = std::from_chars(s.data(), s.data() + s.size(), n);
        if (!v.IsScalar() || v.Tag() == "!" || s.empty() || r.ec != std::errc() ||
            r.ptr != s.data() + s.size() || n == 0 || n > kMaxConversations)
          fail(v, what + ": 'max-conversations' must be a whole number from 1 to 1000000");
        e.max_conversations = n;
        class_only.push_back(kv.first);
      } else if (k == "description") {
        e.description = string_value(v, what + ": 'description'");
      } else if (k == "skills") {
        e.skills = skills(v, what);
      } else {
        fail(kv.first, what + ": unknown key '" + k + "'; the keys of an entry are " + kEntryKeys);
      }
    }
    if (agent_key && class_key)
      fail(*class_key, what +
                           " has both 'agent' and 'class': give 'agent: ID' for a fixed agent, or 'class: "
                           "CLASS' for a new agent per conversation");
    if (!agent_key && !class_key)
      fail(key, what +
                    " has neither 'agent' nor 'class': give 'agent: ID' for a fixed agent, or 'class: "
                    "CLASS' for a new agent per conversation");
    if (agent_key && !class_only.empty())
      fail(class_only.front(),
           what + ": '" + class_only.front().Scalar() +
               "' goes with 'class' (agents made per conversation), not with a fixed 'agent'");
    return e;
  }

  std::vector<SkillConfig> skills(const YAML::Node& v, const std::string& what) {
    std::vector<SkillConfig> out;
    if (v.IsNull()) return out;
    if (!v.IsSequence())
      fail(v, what + ": 'skills' must be a list of {id, name, description, tags, examples}");
    std::set<std::string> ids;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const YAML::Node s = v[i];
      const std::string where = what + ": skills[" + std::to_string(i) + "]";
      if (!s.IsMap()) fail(s, where + " must be a mapping {id, name, description, tags, examples}");
      SkillConfig sk;
      bool has_id = false, has_name = false, has_description = false;
      std::set<std::string> seen;
      for (const auto& kv : s) {
        const std::string k = scalar_key(kv.first);
        if (!seen.insert(k).second) fail(kv.first, where + ": '" + k + "' is given twice");
        if (k == "id") {
          sk.id = nonempty_string(kv.second, where + ": 'id'");
          has_id = true;
          if (!ids.insert(sk.id).second) fail(kv.second, where + ": skill id '" + sk.id + "' is used twice");
        } else if (k == "name") {
          sk.name = nonempty_string(kv.second, where + ": 'name'");
          has_name = true;
        } else if (k == "description") {
          sk.description = nonempty_string(kv.second, where + ": 'description'");
          has_description = true;
        } else if (k == "tags") {
          sk.tags = strings(kv.second, where + ": 'tags'");
        } else if (k == "examples") {
          sk.examples = strings(kv.second, where + ": 'examples'");
        } else {
          fail(kv.first, where + ": unknown key '" + k + "'; the keys of a skill are " + kSkillKeys);
        }
      }
      if (!has_id || !has_name || !has_description)
        fail(s, where + " needs " +
                    (!has_id     ? "'id'"
                     : !has_name ? "'name'"
                                 : "'description'") +
                    " (a skill has id, name and description; tags and examples are optional)");
      out.push_back(std::move(sk));
    }
    return out;
  }

  // YAML to a Value: quoted scalars are strings; plain ones null, booleans, integers and numbers
  // when they read as such (YAML 1.2's core schema), else strings.
  agentd::Value to_value(const YAML::Node& n, int depth, std::size_t& nodes) const {
    if (++nodes > kMaxArgsNodes)
      fail(n, "'args' is too large (more than 100000 values once aliases are expanded)");
    if (depth > kMaxArgsDepth) fail(n, "'args' is nested too deeply (more than 64 levels)");
    if (n.IsNull()) return nullptr;
    if (n.IsSequence()) {
      agentd::Value out = agentd::Value::array();
      for (const auto& item : n) out.push_back(to_value(item, depth + 1, nodes));
      return out;
    }
    if (n.IsMap()) {
      agentd::Value out = agentd::Value::object();
      for (const auto& kv : n) out[scalar_key(kv.first)] = to_value(kv.second, depth + 1, nodes);
      return out;
    }
    const std::string& s = text(n, "a value in 'args'");
    if (n.Tag() == "!") return s;  // quoted
    if (s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
    std::int64_t i = 0;
    const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
    auto r = std::from_chars(begin, s.data() + s.size(), i);
    if (!s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size()) return i;
    if (!s.empty() && s.find_first_of("0123456789") != std::string::npos &&
        s.find_first_not_of("0123456789+-.eE") == std::string::npos) {
      errno = 0;
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (end == s.c_str() + s.size() && errno == 0 && std::isfinite(d)) return d;
    }
    return s;
  }

  std::string source_;
};

// Where the first character that is not UTF-8 starts ("LINE:COLUMN", the column counted in
// characters), or empty when all of text is UTF-8.
std::string bad_utf8_at(const std::string& text) {
  const std::size_t good = agentd::utf8_prefix_length(text);
  if (good == text.size()) return {};
  const std::string_view before(text.data(), good);
  const std::size_t last_newline = before.rfind('\n');
  const std::size_t line_start = last_newline == std::string_view::npos ? 0 : last_newline + 1;
  std::size_t column = 1;  // UTF-8 continuation bytes (10xxxxxx) do not start a character
  for (std::size_t i = line_start; i < good; ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xc0) != 0x80) ++column;
  const auto line = 1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  return std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace

const EntryConfig* ExposureConfig::find(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

std::string ExposureConfig::names() const {
  std::string out;
  for (const auto& e : entries) out += (out.empty() ? "" : ", ") + e.name;
  return out;
}

std::variant<ExposureConfig, ConfigError> parse_exposure_config(const std::string& text,
                                                                const std::string& source) {
  if (const std::string at = bad_utf8_at(text); !at.empty())
    return ConfigError{source + ":" + at + ": not UTF-8 text; save the file as UTF-8"};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return ConfigError{source + ":" + std::to_string(e.mark.line + 1) + ":" +
                       std::to_string(e.mark.column + 1) + ": not valid YAML: " + e.msg};
  }
  try {
    return Parser(source).parse(root);
  } catch (const Fail& f) {
    return ConfigError{f.message};
  } catch (const YAML::Exception& e) {  // a conversion yaml-cpp refuses
    return ConfigError{source + ":" + std::to_string(e.mark.line + 1) + ":" +
                       std::to_string(e.mark.column + 1) + ": " + e.msg};
  }
}

std::variant<ExposureConfig, ConfigError> load_exposure_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ConfigError{path + ": cannot read the file (" + std::strerror(errno) + ")"};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return ConfigError{path + ": cannot read the file"};
  return parse_exposure_config(text.str(), path);
}

agentd::Value skill_json(const SkillConfig& s) {
  agentd::Value out{{"id", s.id}, {"name", s.name}, {"description", s.description}, {"tags", s.tags}};
  if (!s.examples.empty()) out["examples"] = s.examples;
  return out;
}

}  // namespace gateway
