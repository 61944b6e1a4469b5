// The console API's JSON shapes (CONTRACT.md section 2), from the client library's types: pure
// functions, shared by the routes (console_api.cpp) and the sampler.
#pragma once

#include "console/sampling.h"

#include <agentd/client.h>
#include <agentd/error.h>

#include <boost/beast/http/status.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gateway::console {

using json = nlohmann::json;

// JSON text; invalid UTF-8 from an agent's data is replaced (U+FFFD), never an exception.
std::string dump(const json& j);

// One row of the agents table.
json agent_row(const agentd::AgentInfo& a, const std::string& server);
// One finished call.
json span_json(const agentd::TraceSpan& s, const std::string& server);
// One message of an agent's memory: {name, role, content (text), metadata (object or null)}.
json message_json(const agentd::Msg& m);
// {"servers": [...], "totals": {...}}; gateway is the "gateway" object, put first.
json overview_json(json gateway, const std::vector<ServerSnapshot>& servers);
// {"models": [...]}: each model config of each server up, latency percentiles since it started.
json models_json(const std::vector<ServerSnapshot>& servers);

// An error of an upstream call as the gateway's error shape: unknown_agent 404 (code
// "unknown_agent"); bad_args, bad_request, too_large 400; overloaded, disconnected, not_applied,
// stopping 503; timeout 504; anything else 502. The code is agentd's error code name.
struct ErrorAnswer {
  boost::beast::http::status status;
  std::string body;
};
ErrorAnswer upstream_error(const agentd::Error& e);

}  // namespace gateway::console
