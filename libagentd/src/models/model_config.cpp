#include "model_config.h"

#include "config_text.h"

#include <agentd/error.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

namespace agentd::detail {
namespace {

[[noreturn]] void fail(std::string message) { throw Error(ErrorCode::config_error, std::move(message)); }

// ---------------------------------------------------------------------------------------------
// Validation of one config.

struct TypeSpec {
  std::string_view name;
  bool needs_model_name;
  std::vector<std::string_view> fields;       // besides the common ones
  std::vector<std::string_view> client_args;  // keys allowed in client_args
};

const std::vector<std::string_view> kCommonFields = {"config_name", "model_type",     "model_name",
                                                     "api_key",     "client_args",    "generate_args",
                                                     "stream",      "max_concurrency"};
const std::vector<std::string_view> kRetryClientArgs = {"timeout", "max_retries", "retry_initial_delay",
                                                        "retry_max_delay"};

const std::vector<TypeSpec>& type_specs() {
  static const std::vector<std::string_view> sdk_client = {"base_url", "api_key", "default_headers"};
  static const std::vector<std::string_view> openai_client = {"base_url", "api_key", "organization",
                                                              "default_headers"};
  static const std::vector<std::string_view> ollama_fields = {"options", "keep_alive", "host"};
  static const std::vector<std::string_view> ollama_client = {"host", "base_url", "headers"};
  static const std::vector<TypeSpec> specs = {
      {"anthropic_chat", true, {}, sdk_client},
      {"dashscope_chat", true, {}, sdk_client},
      {"dashscope_text_embedding", true, {}, sdk_client},
      {"echo", false, {"delay_ms"}, {}},
      {"gemini_chat", true, {}, sdk_client},
      {"gemini_embedding", true, {}, sdk_client},
      {"litellm_chat", true, {}, sdk_client},
      {"ollama_chat", true, ollama_fields, ollama_client},
      {"ollama_embedding", true, ollama_fields, ollama_client},
      {"ollama_generate", true, ollama_fields, ollama_client},
      {"openai_chat", true, {"organization"}, openai_client},
      {"openai_embedding", true, {"organization"}, openai_client},
      {"yi_chat", true, {"temperature", "top_p", "max_tokens"}, sdk_client},
      {"zhipuai_chat", true, {}, sdk_client},
      {"zhipuai_embedding", true, {}, sdk_client},
      {"post_api_chat",
       false,
       {"api_url", "headers", "json_args", "post_args", "messages_key", "max_retries", "retry_interval",
        "response_path", "timeout", "max_length"},
       {"headers"}},
  };
  return specs;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string join(const std::vector<std::string_view>& items) {
  std::string out;
  for (auto item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

// Validates one config object; names places through the document's positions when it has them.
class ConfigValidator {
 public:
  ConfigValidator(const Value& raw, std::string_view source, const PosMap* positions, std::string pointer,
                  std::size_t index)
      : raw_(raw), source_(source), positions_(positions), pointer_(std::move(pointer)), index_(index) {}

  ModelConfig run() {
    if (!raw_.is_object()) {
      fail_at("", false,
              "a model config must be a mapping (with config_name, model_type, ...), got " + describe(raw_));
    }
    ModelConfig c;
    c.raw = raw_;
    c.source = where("", false);
    c.config_name = required_string(raw_, "config_name");
    if (c.config_name.empty()) fail_at("config_name", false, "config_name must not be empty");
    name_ = c.config_name;
    c.model_type = required_string(raw_, "model_type");

    const TypeSpec* spec = nullptr;
    for (const auto& s : type_specs()) {
      if (s.name == c.model_type) spec = &s;
    }
    if (spec == nullptr) {
      std::vector<std::string_view> names;
      for (const auto& s : type_specs()) names.push_back(s.name);
      fail_at("model_type", false, unsupported_model_type_message(c.model_type));
    }

    std::vector<std::string_view> allowed = kCommonFields;
    allowed.insert(allowed.end(), spec->fields.begin(), spec->fields.end());
    check_keys(raw_, "", allowed);

    if (spec->needs_model_name) {
      c.model_name = required_string(raw_, "model_name");
      if (c.model_name.empty()) fail_at("model_name", false, "model_name must not be empty");
    } else {
      c.model_name = optional_string(raw_, "model_name", "");
    }

    const Value& client_args = optional_object(raw_, "client_args");
    std::vector<std::string_view> client_allowed = kRetryClientArgs;
    client_allowed.insert(client_allowed.end(), spec->client_args.begin(), spec->client_args.end());
    if (c.model_type == "echo") client_allowed.clear();
    check_keys(client_args, "client_args", client_allowed);

    c.api_key = optional_string(raw_, "api_key", optional_string(client_args, "api_key", "", "client_args"));
    c.generate_args = optional_object(raw_, "generate_args");
    c.stream = optional_bool(raw_, "stream", false);
    if (raw_.contains("max_concurrency") && !raw_["max_concurrency"].is_null()) {
      const Value& v = raw_["max_concurrency"];
      auto d = as_number(v);
      if (!d || *d < 1 || *d != std::floor(*d) || *d > 1'000'000) {
        fail_at(
            "max_concurrency", false,
            "field 'max_concurrency' must be a positive integer (asynchronous calls of this model in flight "
            "at once per event loop; default 64), got " +
                describe(v));
      }
      c.max_concurrency = static_cast<int>(*d);
    }
    read_retry_args(c, client_args, "client_args");

    // Each provider's documented default base URL; client_args.base_url overrides it.
    static const std::map<std::string_view, std::string_view> kDefaultBaseUrls = {
        {"anthropic_chat", "https://api.anthropic.com"},
        {"dashscope_chat", "https://dashscope.aliyuncs.com/api/v1"},
        {"dashscope_text_embedding", "https://dashscope.aliyuncs.com/api/v1"},
        {"gemini_chat", "https://generativelanguage.googleapis.com/v1beta"},
        {"gemini_embedding", "https://generativelanguage.googleapis.com/v1beta"},
        {"litellm_chat", "http://localhost:4000"},  // a LiteLLM proxy's default address
        {"openai_chat", "https://api.openai.com/v1"},
        {"openai_embedding", "https://api.openai.com/v1"},
        {"yi_chat", "https://api.lingyiwanwu.com/v1"},
        {"zhipuai_chat", "https://open.bigmodel.cn/api/paas/v4"},
        {"zhipuai_embedding", "https://open.bigmodel.cn/api/paas/v4"},
    };
    const bool ollama = c.model_type.rfind("ollama_", 0) == 0;
    if (auto url = kDefaultBaseUrls.find(c.model_type); url != kDefaultBaseUrls.end()) {
      c.base_url = optional_url(client_args, "base_url", std::string(url->second), "client_args");
      c.headers = string_map(optional_object(client_args, "default_headers", "client_args"),
                             "client_args.default_headers");
      std::string org = optional_string(raw_, "organization",
                                        optional_string(client_args, "organization", "", "client_args"));
      if (!org.empty()) c.headers["OpenAI-Organization"] = org;
      if (c.model_type == "yi_chat") {  // AgentScope's Yi template: sampling settings at the top level
        for (const char* key : {"temperature", "top_p", "max_tokens"}) {
          if (!raw_.contains(key) || raw_[key].is_null()) continue;
          if (!raw_[key].is_number()) {
            fail_at(key, false,
                    std::string("field '") + key + "' must be a number, got " + describe(raw_[key]));
          }
          if (!c.generate_args.contains(key)) c.generate_args[key] = raw_[key];
        }
      }
    } else if (ollama) {
      std::string host = optional_url(client_args, "host", "", "client_args");
      if (host.empty()) host = optional_url(client_args, "base_url", "", "client_args");
      c.base_url = optional_url(raw_, "host", host.empty() ? "http://localhost:11434" : host);
      c.headers = string_map(optional_object(client_args, "headers", "client_args"), "client_args.headers");
      c.extra["options"] = optional_object(raw_, "options");
      if (raw_.contains("keep_alive")) {
        const Value& k = raw_["keep_alive"];
        if (!k.is_string() && !k.is_number()) {
          fail_at("keep_alive", false,
                  "keep_alive must be a duration such as \"5m\" or a number of seconds, got " + describe(k));
        }
        c.extra["keep_alive"] = k;
      }
    } else if (c.model_type == "post_api_chat") {
      c.base_url = required_url(raw_, "api_url");
      Value headers = string_map(optional_object(raw_, "headers"), "headers");
      const Value client_headers =
          string_map(optional_object(client_args, "headers", "client_args"), "client_args.headers");
      for (const auto& [k, v] : client_headers.items()) {
        headers[k] = v;
      }
      c.headers = headers;
      c.extra["json_args"] = optional_object(raw_, "json_args");
      c.extra["messages_key"] = optional_string(raw_, "messages_key", "inputs");  // AgentScope's default
      c.extra["response_path"] = optional_string(raw_, "response_path", "");
      // AgentScope's own spellings and defaults, at the top level.
      if (!client_args.contains("timeout")) c.timeout = std::chrono::seconds(30);
      if (!client_args.contains("retry_initial_delay")) c.retry_initial_delay = std::chrono::seconds(1);
      if (raw_.contains("max_retries")) c.max_retries = non_negative_int(raw_, "max_retries", "");
      if (raw_.contains("retry_interval")) c.retry_initial_delay = seconds(raw_, "retry_interval", "", true);
      if (raw_.contains("timeout")) c.timeout = seconds(raw_, "timeout", "", false);
      const Value& post_args = optional_object(raw_, "post_args");
      check_keys(post_args, "post_args", {"timeout"});
      if (post_args.contains("timeout")) c.timeout = seconds(post_args, "timeout", "post_args", false);
    } else if (c.model_type == "echo") {
      if (raw_.contains("delay_ms")) c.extra["delay_ms"] = non_negative_int(raw_, "delay_ms", "");
    }
    return c;
  }

 private:
  // "file:line:col" of a field (path relative to the config, dotted; its key's place when `key`),
  // falling back to the config's own place, then to the bare source name.
  std::string where(std::string_view field, bool key) const {
    if (positions_ == nullptr) return std::string(source_);
    std::string pointer = pointer_;
    for (std::size_t start = 0; !field.empty() && start <= field.size();) {
      std::size_t dot = field.find('.', start);
      if (dot == std::string_view::npos) dot = field.size();
      pointer += '/' + pointer_escape(field.substr(start, dot - start));
      start = dot + 1;
    }
    auto lookup = [](const auto& map, const std::string& p) {
      auto it = map.find(p);
      return it == map.end() ? Pos{} : it->second;
    };
    Pos p = key ? lookup(positions_->keys, pointer) : Pos{};
    if (p.line < 0) p = lookup(positions_->values, pointer);
    if (p.line < 0) p = lookup(positions_->values, pointer_);
    return format_pos(source_, p);
  }

  [[noreturn]] void fail_at(std::string_view field, bool key, const std::string& message) const {
    std::string who =
        name_.empty() ? "model config #" + std::to_string(index_ + 1) : "model config '" + name_ + "'";
    fail(where(field, key) + ": " + who + ": " + message);
  }

  static std::string describe(const Value& v) {
    // Replace, not throw: a document's strings are bytes, and invalid UTF-8 made dump() throw
    // nlohmann's type_error out of the parser (found by model_config_fuzz).
    std::string text = v.dump(-1, ' ', false, Value::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return std::string(v.type_name()) + " " + text;
  }

  static std::string path(std::string_view parent, std::string_view key) {
    return parent.empty() ? std::string(key) : std::string(parent) + '.' + std::string(key);
  }

  void check_keys(const Value& obj, std::string_view parent,
                  const std::vector<std::string_view>& allowed) const {
    for (const auto& [key, value] : obj.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string message = "unknown field '" + path(parent, key) + "'";
      std::string_view best;
      std::size_t best_distance = 3;
      for (auto candidate : allowed) {
        std::size_t d = edit_distance(key, candidate);
        if (d < best_distance) {
          best_distance = d;
          best = candidate;
        }
      }
      if (!best.empty()) message += " (did you mean '" + path(parent, best) + "'?)";
      message += allowed.empty() ? "; this model type takes no " + std::string(parent)
                                 : "; known fields here: " + join(allowed);
      fail_at(path(parent, key), true, message);
    }
  }

  std::string required_string(const Value& obj, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail_at("", false, "missing required field '" + std::string(key) + "'");
    if (!it->is_string()) {
      fail_at(key, false, "field '" + std::string(key) + "' must be a string, got " + describe(*it));
    }
    return it->get<std::string>();
  }

  std::string optional_string(const Value& obj, std::string_view key, std::string fallback,
                              std::string_view parent = "") const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_string()) {
      fail_at(path(parent, key), false,
              "field '" + path(parent, key) + "' must be a string, got " + describe(*it));
    }
    return it->get<std::string>();
  }

  std::string checked_url(const std::string& url, std::string_view field) const {
    if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
      fail_at(field, false,
              "field '" + std::string(field) + "' must be an http:// or https:// URL, got \"" + url + "\"");
    }
    std::string out = url;
    while (out.size() > 8 && out.back() == '/') out.pop_back();
    return out;
  }

  std::string optional_url(const Value& obj, std::string_view key, std::string fallback,
                           std::string_view parent = "") const {
    std::string url = optional_string(obj, key, "", parent);
    if (url.empty()) return fallback;
    return checked_url(url, path(parent, key));
  }

  std::string required_url(const Value& obj, std::string_view key) const {
    return checked_url(required_string(obj, key), key);
  }

  const Value& optional_object(const Value& obj, std::string_view key, std::string_view parent = "") const {
    static const Value empty = Value::object();
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return empty;
    if (!it->is_object()) {
      fail_at(path(parent, key), false,
              "field '" + path(parent, key) + "' must be a mapping, got " + describe(*it));
    }
    return *it;
  }

  bool optional_bool(const Value& obj, std::string_view key, bool fallback) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
      fail_at(key, false, "field '" + std::string(key) + "' must be true or false, got " + describe(*it));
    }
    return it->get<bool>();
  }

  // A number, or a string holding one (e.g. from ${ENV} in JSON).
  std::optional<double> as_number(const Value& v) const {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const auto& s = v.get_ref<const std::string&>();
      char* end = nullptr;
      errno = 0;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return d;
    }
    return std::nullopt;
  }

  std::chrono::milliseconds seconds(const Value& obj, std::string_view key, std::string_view parent,
                                    bool zero_ok) const {
    const Value& v = obj.at(std::string(key));
    auto d = as_number(v);
    if (!d || !std::isfinite(*d) || *d < 0 || (*d == 0 && !zero_ok) || *d > 86400.0 * 365) {
      fail_at(path(parent, key), false,
              "field '" + path(parent, key) + "' must be a " + (zero_ok ? "non-negative" : "positive") +
                  " number of seconds, got " + describe(v));
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(*d * 1000.0)));
  }

  int non_negative_int(const Value& obj, std::string_view key, std::string_view parent) const {
    const Value& v = obj.at(std::string(key));
    auto d = as_number(v);
    if (!d || *d < 0 || *d != std::floor(*d) || *d > 1'000'000) {
      fail_at(path(parent, key), false,
              "field '" + path(parent, key) + "' must be a non-negative integer, got " + describe(v));
    }
    return static_cast<int>(*d);
  }

  void read_retry_args(ModelConfig& c, const Value& client_args, std::string_view parent) const {
    if (client_args.contains("timeout")) c.timeout = seconds(client_args, "timeout", parent, false);
    if (client_args.contains("max_retries"))
      c.max_retries = non_negative_int(client_args, "max_retries", parent);
    if (client_args.contains("retry_initial_delay")) {
      c.retry_initial_delay = seconds(client_args, "retry_initial_delay", parent, true);
    }
    if (client_args.contains("retry_max_delay")) {
      c.retry_max_delay = seconds(client_args, "retry_max_delay", parent, true);
    }
  }

  Value string_map(const Value& obj, std::string_view field) const {
    for (const auto& [key, value] : obj.items()) {
      if (!value.is_string()) {
        fail_at(path(field, key), false,
                "field '" + path(field, key) + "' must be a string, got " + describe(value));
      }
    }
    return obj;
  }

  const Value& raw_;
  std::string_view source_;
  const PosMap* positions_;
  std::string pointer_;
  std::size_t index_;
  std::string name_;
};

std::vector<ModelConfig> validate_document(const Value& doc, std::string_view source,
                                           const PosMap& positions) {
  std::vector<ModelConfig> configs;
  std::map<std::string, std::string, std::less<>> seen;  // config_name -> where
  auto add = [&](const Value& raw, std::string pointer, std::size_t index) {
    ModelConfig c = ConfigValidator(raw, source, &positions, std::move(pointer), index).run();
    if (auto it = seen.find(c.config_name); it != seen.end()) {
      fail(c.source + ": duplicate config_name '" + c.config_name + "' (first defined at " + it->second +
           ")");
    }
    seen.emplace(c.config_name, c.source);
    configs.push_back(std::move(c));
  };
  if (doc.is_null()) return configs;
  if (doc.is_array()) {
    for (std::size_t i = 0; i < doc.size(); ++i) add(doc[i], "/" + std::to_string(i), i);
  } else if (doc.is_object()) {
    add(doc, "", 0);
  } else {
    auto it = positions.values.find("");
    fail(format_pos(source, it == positions.values.end() ? Pos{} : it->second) +
         ": expected a list of model configs (or one config mapping), got " + std::string(doc.type_name()));
  }
  return configs;
}

}  // namespace

std::string unsupported_model_type_message(std::string_view type) {
  // AgentScope model types agentd does not implement, and what they do.
  static const std::map<std::string_view, std::string_view> kAgentScopeOnly = {
      {"dashscope_image_synthesis", "image synthesis"},
      {"dashscope_multimodal", "multimodal chat"},
      {"openai_dall_e", "image synthesis"},
      {"post_api_dall_e", "image synthesis"},
      {"post_api_embedding", "a generic POST embedding API; use openai_embedding for OpenAI-compatible ones"},
      {"openai_tts", "speech synthesis"},
      {"dashscope_tts", "speech synthesis"},
  };
  std::string valid;
  for (const auto& name : known_model_types()) valid += (valid.empty() ? "" : ", ") + name;
  if (auto it = kAgentScopeOnly.find(type); it != kAgentScopeOnly.end()) {
    return "model_type '" + std::string(type) + "' (" + std::string(it->second) +
           ") is not supported by agentd; supported model_types: " + valid;
  }
  return "unknown model_type '" + std::string(type) + "'; valid model_types: " + valid;
}

const std::vector<std::string>& known_model_types() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& s : type_specs()) out.emplace_back(s.name);
    std::sort(out.begin(), out.end());
    return out;
  }();
  return names;
}

std::vector<ModelConfig> parse_model_configs(std::string_view text, std::string_view source_name) {
  std::size_t first = text.find_first_not_of(" \t\r\n");
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") {  // UTF-8 byte order mark
    text.remove_prefix(3);
    first = text.find_first_not_of(" \t\r\n");
  }
  if (first == std::string_view::npos) return {};
  PosMap positions;
  Value doc = read_config_document(text, source_name, positions);
  return validate_document(doc, source_name, positions);
}

std::vector<ModelConfig> load_model_configs(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail("cannot read model config file " + path + ": " + std::strerror(errno));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("cannot read model config file " + path);
  return parse_model_configs(buffer.str(), path);
}

ModelConfig model_config_from_json(const Value& raw, std::string_view source) {
  return ConfigValidator(raw, source, nullptr, "", 0).run();
}

}  // namespace agentd::detail
