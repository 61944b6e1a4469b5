#include "model_reload.h"

#include <agentd/error.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace agentd::detail {

namespace {

// The text without comments (from '#' at a line's start or after a blank) and blanks.
std::string significant(std::string_view text) {
  std::string out;
  bool comment = false;
  char prev = '\n';
  for (char ch : text) {
    if (ch == '\n') comment = false;
    if (!comment && ch == '#' && (prev == '\n' || prev == ' ' || prev == '\t')) comment = true;
    if (!comment && ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') out += ch;
    prev = ch;
  }
  if (out.rfind("\xEF\xBB\xBF", 0) == 0) out.erase(0, 3);  // a UTF-8 byte order mark
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<ModelConfig> configs_for_reload(std::string_view text, std::string_view source,
                                            const std::vector<std::string>& loaded) {
  auto configs = parse_model_configs(text, source);
  if (!configs.empty() || loaded.empty()) return configs;
  const std::string rest = significant(text);
  if (rest == "[]") return configs;  // said explicitly: remove them all
  throw Error(ErrorCode::config_error,
              fmt::format("{}: holds no model configs ({}); refusing to drop the {} loaded ({}), "
                          "which are kept. Fix the file (a list of configs with config_name and "
                          "model_type), or, to remove every model config on purpose, write `[]` "
                          "in it",
                          source, rest.empty() ? "it is empty, or only comments" : "an empty document",
                          loaded.size(), join(loaded)));
}

std::vector<ModelConfig> read_configs_for_reload(const std::string& path,
                                                 const std::vector<std::string>& loaded) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorCode::config_error,
                fmt::format("cannot read model config file {}: {}", path, std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(ErrorCode::config_error, fmt::format("cannot read model config file {}", path));
  return configs_for_reload(buffer.str(), path, loaded);
}

}  // namespace agentd::detail
