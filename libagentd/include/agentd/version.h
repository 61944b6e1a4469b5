// agentd version and plugin ABI version.
#pragma once

#define AGENTD_VERSION_STRING "0.1.0"

// Bumped whenever agentd::Agent, AgentInit or the plugin table change layout. A plugin built
// against another ABI version is refused at load time with a message saying so.
#define AGENTD_ABI_VERSION 2

namespace agentd {
inline constexpr const char* version() { return AGENTD_VERSION_STRING; }
}  // namespace agentd
