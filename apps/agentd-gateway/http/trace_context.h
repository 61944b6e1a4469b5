// The trace id of an HTTP request (W3C Trace Context, https://www.w3.org/TR/trace-context/): the
// trace-id of the request's `traceparent` header when it has a valid one, else a new random one.
// The gateway passes it on to the agent call (AgentRef::with_trace_id: the server's span of the
// call carries it), logs it in the request's JSON line and answers it in `X-Trace-Id`. Pure
// functions, any thread.
#pragma once

#include <string>
#include <string_view>

namespace gateway::http {

// The trace-id (32 lowercase hex digits) of a traceparent header value
// ("00-<trace-id>-<parent-id>-<flags>", or a later version's longer form), or "" when it is not
// a valid one (wrong shape, upper-case hex, version ff, an all-zero trace-id or parent-id), which
// W3C Trace Context says to ignore.
std::string traceparent_trace_id(std::string_view traceparent);

// A new random trace-id: 32 lowercase hex digits, never all zeros.
std::string new_trace_id();

// traceparent_trace_id(traceparent), or new_trace_id() when that is "".
std::string request_trace_id(std::string_view traceparent);

}  // namespace gateway::http
