// agentd::Value: the JSON-like value tree carried by messages, agent args and method results.
#pragma once

#include <nlohmann/json.hpp>

namespace agentd {

// Value is nlohmann::json. Binary payloads use Value::binary(...) and travel as bytes, not base64.
using Value = nlohmann::json;

}  // namespace agentd
