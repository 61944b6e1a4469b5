// agentctl's commands, one function each (the table in command_line.cpp names them). Each runs
// on the main thread with the parsed invocation, prints its result on stdout (JSON with --json)
// and returns the exit code; failures are thrown for main to report: UsageError (nothing was
// sent), agentd::Error (from the server or the connection), LocalError (up/down/ps).
#pragma once

#include "command_line.h"

namespace agentctl {

// Against the server at --host/--port.
int cmd_status(const Invocation& inv);
int cmd_list(const Invocation& inv);
int cmd_create(const Invocation& inv);
int cmd_clone(const Invocation& inv);
int cmd_call(const Invocation& inv);
int cmd_method(const Invocation& inv);
int cmd_memory(const Invocation& inv);
int cmd_delete(const Invocation& inv);
int cmd_reload(const Invocation& inv);
int cmd_stop(const Invocation& inv);
int cmd_ping(const Invocation& inv);
int cmd_trace(const Invocation& inv);
int cmd_tools(const Invocation& inv);
int cmd_tool(const Invocation& inv);

// Local development servers (local_servers.h).
int cmd_up(const Invocation& inv);
int cmd_down(const Invocation& inv);
int cmd_ps(const Invocation& inv);

}  // namespace agentctl
