// The A2A 1.0 JSON-RPC wire format (a2aproject/A2A docs/specification.md, section 9; the
// objects of specification/a2a.proto in ProtoJSON: camelCase fields, enum names as strings):
// pure functions (no I/O), so the mapping can be tested and fuzzed alone.
//
// How a message becomes a call: the text parts of the message are joined with newlines and are
// the input of the agent's reply() as Msg("user", text, "user"); a part that is not text
// (raw, url, data) is refused with ContentTypeNotSupported. The reply's text is the task's one
// artifact ("reply"); a failed call's typed error is the failed status's message, with the
// agentd error code as a google.rpc.ErrorInfo-like metadata entry.
#pragma once

#include "a2a/task_store.h"

#include <agentd/error.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace gateway::a2a {

using json = nlohmann::json;

// JSON-RPC and A2A error codes (specification section 5.4 and 9.5).
enum RpcCode : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
  kAgentNotFound = -32000,  // the gateway's own: no agent under that id (HTTP 404)
  kTaskNotFound = -32001,
  kTaskNotCancelable = -32002,
  kPushNotificationNotSupported = -32003,
  kUnsupportedOperation = -32004,
  kContentTypeNotSupported = -32005,
  kVersionNotSupported = -32009,
};

struct RpcError {
  int code;
  std::string message;
  json data = nullptr;  // an array of detail objects, or null
};

struct RpcRequest {
  json id;  // string, number or null
  std::string method;
  json params;  // an object (empty when absent)
};

// A JSON-RPC 2.0 request body; the error (parse error, invalid request) and the id it is for
// (null when the id could not be read).
std::variant<RpcRequest, std::pair<json, RpcError>> parse_rpc(const std::string& body);

std::string rpc_result(const json& id, json result);
std::string rpc_error(const json& id, const RpcError& e);

// An agentd::Error as a JSON-RPC error (-32603 with an ErrorInfo naming agentd's code).
RpcError rpc_error_of(const agentd::Error& e);

// SendMessage / SendStreamingMessage params (a SendMessageRequest), checked.
struct SendRequest {
  json message;      // the client's Message as sent
  std::string text;  // its text parts, joined with newlines
  std::string context_id;
  std::string task_id;  // a task the message continues (none of ours accepts more messages)
  bool return_immediately = false;
  std::optional<int> history_length;
};
std::variant<SendRequest, RpcError> parse_send_request(const json& params);

// A task as the spec's Task object. history_length: nullopt all, 0 none, n the last n.
json task_json(const Task& t, std::optional<int> history_length = std::nullopt, bool artifacts = true);
// The Message an agent's failure becomes (the failed status's message).
json failure_message(const agentd::Error& e, const std::string& task_id, const std::string& context_id);
// "2025-10-28T10:30:00.000Z"
std::string iso_time(std::chrono::system_clock::time_point t);
std::optional<std::chrono::system_clock::time_point> parse_iso_time(const std::string& s);

// Stream responses (StreamResponse: one of task, statusUpdate, artifactUpdate) as SSE events,
// "data: {jsonrpc, id, result}\n\n".
std::string sse_event(const json& id, json stream_response);
json status_update(const Task& t);
json artifact_update(const Task& t, const std::string& text, bool append, bool last_chunk);

// Optional int field: absent/null nullopt, a non-negative integer, or an error naming it.
std::variant<std::optional<int>, RpcError> optional_count(const json& params, const char* name);
// A required non-empty string field, or an InvalidParams error naming it.
std::variant<std::string, RpcError> required_string(const json& params, const char* name);

// Agent cards. base: "http://HOST" as the client reached the gateway.
struct CardAgent {
  std::string id;
  std::string class_name;
  std::string name;
};
json agent_card(const CardAgent& a, const std::string& base, bool bearer_auth);
// The gateway's own card: one skill per agent (its id; the description names its URL) and one
// interface per agent (its base URL, the agent's id as the interface's tenant).
json gateway_card(const std::vector<CardAgent>& agents, const std::string& base, bool bearer_auth);

}  // namespace gateway::a2a
