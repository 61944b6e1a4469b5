#include "a2a/a2a_json.h"

#include <agentd/version.h>

#include <cctype>
#include <cstdio>
#include <ctime>

namespace gateway::a2a {

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

RpcError invalid_params(const std::string& field, const std::string& what) {
  json detail{{"@type", "type.googleapis.com/google.rpc.BadRequest"},
              {"fieldViolations", json::array({json{{"field", field}, {"description", what}}})}};
  return RpcError{kInvalidParams, "Invalid parameters: " + field + ": " + what, json::array({detail})};
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

json error_info(const agentd::Error& e) {
  json meta{{"code", std::string(agentd::to_string(e.code()))},
            {"retryable", e.retryable() ? "true" : "false"}};
  if (!e.agent_id().empty()) meta["agent"] = e.agent_id();
  return json{{"@type", "type.googleapis.com/google.rpc.ErrorInfo"},
              {"reason", upper(agentd::to_string(e.code()))},
              {"domain", "agentd"},
              {"metadata", meta}};
}

json security(json& card, bool bearer_auth) {
  if (!bearer_auth) return card;
  card["securitySchemes"] = {{"bearer", {{"httpAuthSecurityScheme", {{"scheme", "Bearer"}}}}}};
  card["securityRequirements"] = json::array({json{{"schemes", {{"bearer", {{"list", json::array()}}}}}}});
  return card;
}

json interface_at(const std::string& base, const std::string& id) {
  return json{{"url", base + "/a2a/" + id + "/"}, {"protocolBinding", "JSONRPC"}, {"protocolVersion", "1.0"}};
}

}  // namespace

std::variant<RpcRequest, std::pair<json, RpcError>> parse_rpc(const std::string& body) {
  json req;
  try {
    req = json::parse(body);
  } catch (const json::exception& e) {
    return std::pair{json(nullptr), RpcError{kParseError, std::string("Invalid JSON payload: ") + e.what()}};
  }
  if (!req.is_object())
    return std::pair{json(nullptr), RpcError{kInvalidRequest,
                                             "the request must be a JSON-RPC 2.0 object "
                                             "(batches are not served)"}};
  json id = nullptr;
  if (req.contains("id")) {
    if (!req["id"].is_string() && !req["id"].is_number() && !req["id"].is_null())
      return std::pair{json(nullptr), RpcError{kInvalidRequest, "'id' must be a string, a number or null"}};
    id = req["id"];
  }
  if (!req.contains("jsonrpc") || req["jsonrpc"] != "2.0")
    return std::pair{id, RpcError{kInvalidRequest, "'jsonrpc' must be \"2.0\""}};
  if (!req.contains("method") || !req["method"].is_string())
    return std::pair{id, RpcError{kInvalidRequest, "'method' must be a string"}};
  RpcRequest out{id, req["method"].get<std::string>(), json::object()};
  if (req.contains("params") && !req["params"].is_null()) {
    if (!req["params"].is_object())
      return std::pair{id, RpcError{kInvalidParams, "'params' must be an object"}};
    out.params = req["params"];
  }
  return out;
}

std::string rpc_result(const json& id, json result) {
  return dump(json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
}

std::string rpc_error(const json& id, const RpcError& e) {
  json err{{"code", e.code}, {"message", e.message}};
  if (!e.data.is_null()) err["data"] = e.data;
  return dump(json{{"jsonrpc", "2.0"}, {"id", id}, {"error", err}});
}

RpcError rpc_error_of(const agentd::Error& e) {
  return RpcError{e.code() == agentd::ErrorCode::unknown_agent ? kAgentNotFound : kInternalError, e.what(),
                  json::array({error_info(e)})};
}

std::variant<std::optional<int>, RpcError> optional_count(const json& params, const char* name) {
  if (!params.contains(name) || params[name].is_null()) return std::optional<int>();
  const json& v = params[name];
  if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 1000000)
    return invalid_params(name, "must be a non-negative integer");
  return std::optional<int>(v.get<int>());
}

std::variant<std::string, RpcError> required_string(const json& params, const char* name) {
  if (!params.contains(name) || !params[name].is_string() || params[name].get<std::string>().empty())
    return invalid_params(name, "is required: a non-empty string");
  return params[name].get<std::string>();
}

std::variant<SendRequest, RpcError> parse_send_request(const json& params) {
  if (!params.contains("message") || !params["message"].is_object())
    return invalid_params("message", "is required: a Message object");
  const json& m = params["message"];
  SendRequest out;
  out.message = m;
  if (!m.contains("messageId") || !m["messageId"].is_string() || m["messageId"].get<std::string>().empty())
    return invalid_params("message.messageId", "is required: a non-empty string");
  if (m.contains("role") && !m["role"].is_string()) return invalid_params("message.role", "must be a string");
  if (!m.contains("parts") || !m["parts"].is_array() || m["parts"].empty())
    return invalid_params("message.parts", "at least one part is required");
  for (std::size_t i = 0; i < m["parts"].size(); ++i) {
    const json& p = m["parts"][i];
    const std::string where = "message.parts[" + std::to_string(i) + "]";
    if (!p.is_object()) return invalid_params(where, "must be a Part object");
    if (!p.contains("text")) {
      if (p.contains("raw") || p.contains("url") || p.contains("data"))
        return RpcError{kContentTypeNotSupported,
                        where + ": only text parts are understood (this agent takes text/plain)"};
      return invalid_params(where, "has no content (text, raw, url or data)");
    }
    if (!p["text"].is_string()) return invalid_params(where + ".text", "must be a string");
    if (!out.text.empty()) out.text += "\n";
    out.text += p["text"].get<std::string>();
  }
  for (const char* f : {"contextId", "taskId"})
    if (m.contains(f) && !m[f].is_null() && !m[f].is_string())
      return invalid_params(std::string("message.") + f, "must be a string");
  out.context_id = m.value("contextId", json("")).is_string() ? m.value("contextId", std::string()) : "";
  out.task_id = m.value("taskId", json("")).is_string() ? m.value("taskId", std::string()) : "";
  if (params.contains("configuration") && !params["configuration"].is_null()) {
    const json& c = params["configuration"];
    if (!c.is_object()) return invalid_params("configuration", "must be an object");
    if (c.contains("returnImmediately") && !c["returnImmediately"].is_null()) {
      if (!c["returnImmediately"].is_boolean())
        return invalid_params("configuration.returnImmediately", "must be true or false");
      out.return_immediately = c["returnImmediately"].get<bool>();
    }
    auto h = optional_count(c, "historyLength");
    if (auto* e = std::get_if<RpcError>(&h)) return *e;
    out.history_length = std::get<std::optional<int>>(h);
  }
  return out;
}

std::string iso_time(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

std::optional<std::chrono::system_clock::time_point> parse_iso_time(const std::string& s) {
  std::tm tm{};
  int used = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &used) != 6)
    return std::nullopt;
  std::string rest = s.substr(static_cast<std::size_t>(used));
  long ms = 0;
  if (!rest.empty() && rest[0] == '.') {
    std::size_t i = 1;
    long scale = 100;
    for (; i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i])); ++i, scale /= 10)
      ms += (rest[i] - '0') * scale;
    if (i == 1) return std::nullopt;
    rest = rest.substr(i);
  }
  // Years a system_clock time point holds (nanoseconds from 1970 in 64 bits: up to 2262).
  if (rest != "Z" || tm.tm_year < 1900 || tm.tm_year > 2200 || tm.tm_mon < 1 || tm.tm_mon > 12 ||
      tm.tm_mday < 1 || tm.tm_mday > 31)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t secs = timegm(&tm);
  return std::chrono::system_clock::from_time_t(secs) + std::chrono::milliseconds(ms);
}

json failure_message(const agentd::Error& e, const std::string& task_id, const std::string& context_id) {
  return json{{"messageId", task_id + "-status"},
              {"contextId", context_id},
              {"taskId", task_id},
              {"role", "ROLE_AGENT"},
              {"parts", json::array({json{{"text", e.what()}}})},
              {"metadata", {{"agentd", {{"error", error_info(e)}}}}}};
}

json task_json(const Task& t, std::optional<int> history_length, bool artifacts) {
  json status{{"state", state_name(t.state)}, {"timestamp", iso_time(t.updated)}};
  if (!t.status_message.is_null()) status["message"] = t.status_message;
  json task{{"id", t.id}, {"contextId", t.context_id}, {"status", status}};
  if (artifacts) {
    task["artifacts"] = json::array();
    if (t.state == TaskState::completed || !t.reply.empty())
      task["artifacts"].push_back(json{
          {"artifactId", "reply"}, {"name", "reply"}, {"parts", json::array({json{{"text", t.reply}}})}});
  }
  if (!history_length || *history_length > 0) {
    json m = t.request;
    m["taskId"] = t.id;
    m["contextId"] = t.context_id;
    task["history"] = json::array({m});
  }
  task["metadata"] = {{"agentd", {{"agent", t.agent}}}};
  return task;
}

std::string sse_event(const json& id, json stream_response) {
  return "data: " + rpc_result(id, std::move(stream_response)) + "\n\n";
}

json status_update(const Task& t) {
  json status{{"state", state_name(t.state)}, {"timestamp", iso_time(t.updated)}};
  if (!t.status_message.is_null()) status["message"] = t.status_message;
  return json{{"statusUpdate", {{"taskId", t.id}, {"contextId", t.context_id}, {"status", status}}}};
}

json artifact_update(const Task& t, const std::string& text, bool append, bool last_chunk) {
  json artifact{{"artifactId", "reply"}, {"name", "reply"}, {"parts", json::array({json{{"text", text}}})}};
  return json{{"artifactUpdate",
               {{"taskId", t.id},
                {"contextId", t.context_id},
                {"artifact", artifact},
                {"append", append},
                {"lastChunk", last_chunk}}}};
}

json agent_card(const CardAgent& a, const std::string& base, bool bearer_auth) {
  json card{
      {"name", a.name.empty() ? a.id : a.name},
      {"description",
       "agentd agent '" + a.id + "' (class " + a.class_name + "), reached through agentd-gateway"},
      {"supportedInterfaces", json::array({interface_at(base, a.id)})},
      {"provider", {{"organization", "agentd"}, {"url", base}}},
      {"version", AGENTD_VERSION_STRING},
      {"capabilities", {{"streaming", true}, {"pushNotifications", false}, {"extendedAgentCard", false}}},
      {"defaultInputModes", json::array({"text/plain"})},
      {"defaultOutputModes", json::array({"text/plain"})},
      {"skills", json::array({json{{"id", "reply"},
                                   {"name", "reply"},
                                   {"description", "The agent's reply to the text of a message"},
                                   {"tags", json::array({"agentd", a.class_name})}}})}};
  return security(card, bearer_auth);
}

json gateway_card(const std::vector<CardAgent>& agents, const std::string& base, bool bearer_auth) {
  json interfaces = json::array();
  json skills = json::array();
  for (const auto& a : agents) {
    json i = interface_at(base, a.id);
    i["tenant"] = a.id;
    interfaces.push_back(i);
    skills.push_back(json{
        {"id", a.id},
        {"name", a.name.empty() ? a.id : a.name},
        {"description", "agent '" + a.id + "' (class " + a.class_name + "): A2A at " + base + "/a2a/" + a.id +
                            "/, its card at " + base + "/a2a/" + a.id + "/.well-known/agent-card.json"},
        {"tags", json::array({"agentd", a.class_name})}});
  }
  json card{
      {"name", "agentd-gateway"},
      {"description",
       "The agents of an agentd deployment; each has its own A2A endpoint and card "
       "(one interface and one skill per agent)"},
      {"supportedInterfaces", interfaces},
      {"provider", {{"organization", "agentd"}, {"url", base}}},
      {"version", AGENTD_VERSION_STRING},
      {"capabilities", {{"streaming", true}, {"pushNotifications", false}, {"extendedAgentCard", false}}},
      {"defaultInputModes", json::array({"text/plain"})},
      {"defaultOutputModes", json::array({"text/plain"})},
      {"skills", skills}};
  return security(card, bearer_auth);
}

}  // namespace gateway::a2a
