// The OpenAI chat-completions wire format, and how it maps onto an agent call: pure functions
// (no I/O), so the mapping can be tested and fuzzed alone.
//
// How a request becomes a call (this slice): `model` names the agent (its id); the LAST message
// whose role is "user" becomes the input of the agent's reply() as Msg(name, content, "user")
// (name: the message's "name", else "user"; content: the text, or the text parts of a content
// array joined with newlines). Earlier messages are not sent: an agent keeps its own memory
// across calls.
#pragma once

#include <agentd/error.h>
#include <agentd/model.h>
#include <agentd/msg.h>

#include <boost/beast/http/status.hpp>

#include <cstdint>
#include <string>
#include <variant>

namespace gateway::openai {

using Status = boost::beast::http::status;

struct ChatRequest {
  std::string model;
  agentd::Msg input;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk carries the usage
  std::string user;            // the request's `user` (a conversation key for per-conversation entries)
};

// An answer that is an error: the HTTP status and the body in OpenAI's error shape.
struct ErrorReply {
  Status status;
  std::string body;
};

// The body of POST /v1/chat/completions, checked. An ErrorReply (400) says what is wrong.
std::variant<ChatRequest, ErrorReply> parse_chat_request(const std::string& body);

// An agentd::Error from the upstream call as OpenAI's error shape: unknown_agent 404 (code
// "model_not_found", as OpenAI's); bad_request, bad_args, too_large 400; overloaded, disconnected,
// not_applied, stopping 503; timeout 504; anything else (the agent failed, its model failed, ...)
// 502. The code is otherwise agentd's error code ("agent_failed", ...).
ErrorReply error_reply(const agentd::Error& e, const std::string& model);
// 400 / 401 / 404 / 405 for the gateway's own refusals.
ErrorReply invalid_request(Status status, const std::string& message, const std::string& code = {},
                           const std::string& param = {});

// OpenAI's usage object from a call's model use: prompt_tokens, completion_tokens and their sum
// total_tokens, over every model call the agent made while it answered.
// A non-streamed answer: a chat.completion object with that usage.
std::string completion_json(const std::string& id, const std::string& model, std::int64_t created,
                            const std::string& text, const agentd::CallUsage& usage = {});
// One chat.completion.chunk as a server-sent event ("data: {...}\n\n"). role: set in the first
// chunk only; finish_reason: set in the last only.
std::string chunk_event(const std::string& id, const std::string& model, std::int64_t created,
                        const std::string* role, const std::string* content, const char* finish_reason);
// The last chunk of a stream asked with stream_options.include_usage: no choices, the usage.
std::string usage_event(const std::string& id, const std::string& model, std::int64_t created,
                        const agentd::CallUsage& usage);
// A failure in the middle of a stream: an event carrying OpenAI's error object.
std::string error_event(const agentd::Error& e, const std::string& model);
inline constexpr const char* kDoneEvent = "data: [DONE]\n\n";

// GET /v1/models: a list object of model entries (id, object "model", owned_by "agentd").
struct ModelEntry {
  std::string id;
  std::string agent_class;  // (fields left empty are left out)
  std::string name;
  std::string agent;  // a configured entry's fixed agent
  std::string description;
};
std::string models_json(const std::vector<ModelEntry>& models);

}  // namespace gateway::openai
