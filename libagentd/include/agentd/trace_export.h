// Trace spans (Client::traces) as a file standard timeline viewers open.
#pragma once

#include <agentd/client.h>

#include <string>
#include <vector>

namespace agentd {

// The spans one server reported, and the name to show for it (its address).
struct ServerSpans {
  std::string server;
  std::vector<TraceSpan> spans;
};

// The Chrome trace-event format (JSON object form, {"traceEvents": [...]}) that Perfetto
// (ui.perfetto.dev) and chrome://tracing open: a process per server, a thread (row) per agent,
// per call a complete event ("X") for its run, preceded by one for its wait in the queue when it
// waited, with the span's fields as args; and a flow arrow from the call that produced each
// placeholder a call consumed (when that call is among the spans) to the consuming call.
std::string to_chrome_trace(const std::vector<ServerSpans>& servers);

}  // namespace agentd
