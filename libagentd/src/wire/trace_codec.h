// The wire form of trace spans (AgentServer.traces): one finished agent call each. The server
// writes and the client reads through this pair only. Private to libagentd; any thread.
#pragma once

#include <agentd/client.h>

#include "agentd.capnp.h"

namespace agentd::detail {

void write_trace_span(const TraceSpan& s, wire::Span::Builder out);
TraceSpan read_trace_span(wire::Span::Reader in);

}  // namespace agentd::detail
