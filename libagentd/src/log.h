// Logging set-up: spdlog to stderr (journald collects it under systemd).
#pragma once

#include <string>

namespace agentd::detail {

// level: trace, debug, info, warn, error, critical or off (validated by the caller).
void setup_logging(const std::string& level);

}  // namespace agentd::detail
