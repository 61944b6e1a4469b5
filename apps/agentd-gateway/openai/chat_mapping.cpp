#include "openai/chat_mapping.h"

#include <nlohmann/json.hpp>

namespace gateway::openai {

using json = nlohmann::json;

ErrorReply invalid_request(Status status, const std::string& message, const std::string& code,
                           const std::string& param) {
  json e{{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", nullptr}};
  if (!code.empty()) e["code"] = code;
  if (!param.empty()) e["param"] = param;
  if (status == Status::unauthorized) e["type"] = "authentication_error";
  return ErrorReply{status, json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace)};
}

namespace {

ErrorReply bad(const std::string& message, const std::string& param = {}) {
  return invalid_request(Status::bad_request, message, "invalid_request", param);
}

// A message's content as text: a string, or the text parts of an array of content parts.
std::variant<std::string, ErrorReply> content_text(const json& content, std::size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return bad(where + " must be a string or an array of content parts", where);
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return bad(
          where + "[" + std::to_string(i) + "] is not a text part ({\"type\": \"text\", \"text\": ...})",
          where);
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

std::variant<ChatRequest, ErrorReply> parse_chat_request(const std::string& body) {
  json req;
  try {
    req = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number too big
    return bad(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!req.is_object()) return bad("the request body must be a JSON object");
  ChatRequest out;
  if (!req.contains("model") || !req["model"].is_string() || req["model"].get<std::string>().empty())
    return bad("'model' is required: a string naming the agent (GET /v1/models lists them)", "model");
  out.model = req["model"].get<std::string>();
  if (req.contains("stream") && !req["stream"].is_null()) {
    if (!req["stream"].is_boolean()) return bad("'stream' must be true or false", "stream");
    out.stream = req["stream"].get<bool>();
  }
  if (req.contains("stream_options") && !req["stream_options"].is_null()) {
    const json& so = req["stream_options"];
    if (!so.is_object())
      return bad("'stream_options' must be an object such as {\"include_usage\": true}", "stream_options");
    if (!out.stream) return bad("'stream_options' is only allowed with \"stream\": true", "stream_options");
    if (so.contains("include_usage") && !so["include_usage"].is_null()) {
      if (!so["include_usage"].is_boolean())
        return bad("'stream_options.include_usage' must be true or false", "stream_options");
      out.include_usage = so["include_usage"].get<bool>();
    }
  }
  if (req.contains("user") && !req["user"].is_null()) {
    if (!req["user"].is_string()) return bad("'user' must be a string", "user");
    out.user = req["user"].get<std::string>();
  }
  if (!req.contains("messages") || !req["messages"].is_array() || req["messages"].empty())
    return bad("'messages' is required: a non-empty array of {\"role\", \"content\"}", "messages");
  const json& messages = req["messages"];
  std::size_t last_user = messages.size();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return bad("messages[" + std::to_string(i) + "] must be an object with a string 'role'", "messages");
    if (m["role"] == "user") last_user = i;
  }
  if (last_user == messages.size()) return bad("'messages' holds no message with role \"user\"", "messages");
  const json& m = messages[last_user];
  if (!m.contains("content"))
    return bad("messages[" + std::to_string(last_user) + "] has no 'content'", "messages");
  auto text = content_text(m["content"], last_user);
  if (auto* e = std::get_if<ErrorReply>(&text)) return *e;
  std::string name = "user";
  if (m.contains("name") && m["name"].is_string()) name = m["name"].get<std::string>();
  out.input = agentd::Msg(name, std::get<std::string>(text), "user");
  return out;
}

ErrorReply error_reply(const agentd::Error& e, const std::string& model) {
  using agentd::ErrorCode;
  const std::string code(agentd::to_string(e.code()));
  auto shaped = [&](Status status, const std::string& type, const std::string& message,
                    const std::string& openai_code = {}) {
    json err{{"message", message},
             {"type", type},
             {"param", nullptr},
             {"code", openai_code.empty() ? code : openai_code}};
    return ErrorReply{status, json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace)};
  };
  switch (e.code()) {
    case ErrorCode::unknown_agent:
      return shaped(Status::not_found, "invalid_request_error",
                    "the model '" + model +
                        "' does not exist: no agent with that id on the server "
                        "(GET /v1/models lists them)",
                    "model_not_found");
    case ErrorCode::bad_request:
    case ErrorCode::bad_args:
    case ErrorCode::too_large:
      return shaped(Status::bad_request, "invalid_request_error", e.what());
    case ErrorCode::overloaded:
    case ErrorCode::disconnected:
    case ErrorCode::not_applied:
    case ErrorCode::stopping:
      return shaped(Status::service_unavailable, "server_error", e.what());
    case ErrorCode::timeout:
      return shaped(Status::gateway_timeout, "server_error", e.what());
    default:
      return shaped(Status::bad_gateway, "agent_error", e.what());
  }
}

namespace {

json usage_json(const agentd::CallUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

}  // namespace

std::string completion_json(const std::string& id, const std::string& model, std::int64_t created,
                            const std::string& text, const agentd::CallUsage& usage) {
  json choice{{"index", 0},
              {"message", {{"role", "assistant"}, {"content", text}}},
              {"logprobs", nullptr},
              {"finish_reason", "stop"}};
  return json{{"id", id},       {"object", "chat.completion"},      {"created", created},
              {"model", model}, {"choices", json::array({choice})}, {"usage", usage_json(usage)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string chunk_event(const std::string& id, const std::string& model, std::int64_t created,
                        const std::string* role, const std::string* content, const char* finish_reason) {
  json delta = json::object();
  if (role) delta["role"] = *role;
  if (content) delta["content"] = *content;
  json choice{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (finish_reason) choice["finish_reason"] = finish_reason;
  json chunk{{"id", id},
             {"object", "chat.completion.chunk"},
             {"created", created},
             {"model", model},
             {"choices", json::array({choice})}};
  return "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string usage_event(const std::string& id, const std::string& model, std::int64_t created,
                        const agentd::CallUsage& usage) {
  json chunk{{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
             {"model", model}, {"choices", json::array()},          {"usage", usage_json(usage)}};
  return "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string error_event(const agentd::Error& e, const std::string& model) {
  return "data: " + error_reply(e, model).body + "\n\n";
}

std::string models_json(const std::vector<ModelEntry>& models) {
  json data = json::array();
  for (const auto& m : models) {
    json about = json::object();
    if (!m.agent_class.empty()) about["class"] = m.agent_class;
    if (!m.name.empty()) about["name"] = m.name;
    if (!m.agent.empty()) about["agent"] = m.agent;
    if (!m.description.empty()) about["description"] = m.description;
    data.push_back(
        {{"id", m.id}, {"object", "model"}, {"created", 0}, {"owned_by", "agentd"}, {"agentd", about}});
  }
  return json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace gateway::openai
