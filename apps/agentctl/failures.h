// How a failed agentctl run is reported, and the exit code it gets: a line on stderr (with a
// hint for the server's errors), and with --json also {"error": {...}} on stdout.
#pragma once

#include "command_line.h"
#include "local_servers.h"

#include <agentd/error.h>

#include <exception>

namespace agentctl {

// Each prints the report and returns the exit code. inv is as far as parsing got.
int report_usage_error(const UsageError& e, const Invocation& inv);         // kExitUsage
int report_local_error(const LocalError& e, const Invocation& inv);         // kExitFailed
int report_internal_error(const std::exception& e, const Invocation& inv);  // kExitFailed
// kExitUnreachable when the connection failed, else kExitFailed.
int report_server_error(const agentd::Error& e, const Invocation& inv);

}  // namespace agentctl
