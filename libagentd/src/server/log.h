// Logging set-up: spdlog to stderr (journald collects it under systemd).
#pragma once

#include <memory>
#include <string>

#include <spdlog/formatter.h>

namespace agentd::detail {

// level: trace, debug, info, warn, error, critical or off; format: text or json (both validated
// by the caller). json writes one object per line: {"time":"…","level":"info","msg":"…"}.
void setup_logging(const std::string& level, const std::string& format = "text");

// The json format's formatter (exposed for tests).
std::unique_ptr<spdlog::formatter> make_json_formatter();

}  // namespace agentd::detail
