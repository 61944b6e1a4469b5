#include "a2a/a2a_v03_json.h"

#include <string_view>

namespace gateway::a2a::v03 {

namespace {

RpcError invalid_params(const std::string& field, const std::string& what) {
  json detail{{"@type", "type.googleapis.com/google.rpc.BadRequest"},
              {"fieldViolations", json::array({json{{"field", field}, {"description", what}}})}};
  return RpcError{kInvalidParams, "Invalid parameters: " + field + ": " + what, json::array({detail})};
}

// A part of a stored (A2A 1.0) message or artifact as 0.3's Part.
json part(const json& p) {
  if (!p.is_object()) return p;
  json out;
  if (p.contains("text")) {
    out = json{{"kind", "text"}, {"text", p["text"]}};
  } else if (p.contains("data")) {
    out = json{{"kind", "data"}, {"data", p["data"]}};
  } else if (p.contains("url") || p.contains("raw")) {
    json file = p.contains("url") ? json{{"uri", p["url"]}} : json{{"bytes", p["raw"]}};
    if (p.contains("mediaType")) file["mimeType"] = p["mediaType"];
    if (p.contains("filename")) file["name"] = p["filename"];
    out = json{{"kind", "file"}, {"file", file}};
  } else {
    return p;
  }
  if (p.contains("metadata")) out["metadata"] = p["metadata"];
  return out;
}

json parts(const json& ps) {
  if (!ps.is_array()) return ps;
  json out = json::array();
  for (const auto& p : ps) out.push_back(part(p));
  return out;
}

json artifact(json a) {
  if (a.is_object() && a.contains("parts")) a["parts"] = parts(a["parts"]);
  return a;
}

// A 1.0 TaskStatus object as 0.3's: the state's name and the message.
json status(const Task& t, json s) {
  s["state"] = v03::state_name(t.state);
  if (s.contains("message")) s["message"] = message(s["message"]);
  return s;
}

}  // namespace

const char* state_name(TaskState s) {
  switch (s) {
    case TaskState::working:
      return "working";
    case TaskState::completed:
      return "completed";
    case TaskState::failed:
      return "failed";
    case TaskState::canceled:
      return "canceled";
  }
  return "unknown";
}

json message(const json& m) {
  if (!m.is_object()) return m;
  json out = m;
  out["kind"] = "message";
  if (m.contains("role")) out["role"] = m["role"] == "ROLE_AGENT" ? "agent" : "user";
  if (m.contains("parts")) out["parts"] = parts(m["parts"]);
  return out;
}

std::variant<SendRequest, RpcError> parse_send_params(const json& params) {
  if (!params.contains("message") || !params["message"].is_object())
    return invalid_params("message", "is required: a Message object");
  const json& m = params["message"];
  if (m.contains("kind") && m["kind"] != "message")
    return invalid_params("message.kind", "must be \"message\"");
  if (!m.contains("messageId") || !m["messageId"].is_string() || m["messageId"].get<std::string>().empty())
    return invalid_params("message.messageId", "is required: a non-empty string");
  if (m.contains("role") && m["role"] != "user" && m["role"] != "agent")
    return invalid_params("message.role", "must be \"user\" or \"agent\"");
  if (!m.contains("parts") || !m["parts"].is_array() || m["parts"].empty())
    return invalid_params("message.parts", "at least one part is required");
  for (const char* f : {"contextId", "taskId"})
    if (m.contains(f) && !m[f].is_null() && !m[f].is_string())
      return invalid_params(std::string("message.") + f, "must be a string");

  SendRequest out;
  // The message in A2A 1.0's form (what the store holds): no kind, a ROLE_ name, untagged parts.
  out.message = m;
  out.message.erase("kind");
  out.message["role"] = m.value("role", json("user")) == "agent" ? "ROLE_AGENT" : "ROLE_USER";
  out.message["parts"] = json::array();
  for (std::size_t i = 0; i < m["parts"].size(); ++i) {
    const json& p = m["parts"][i];
    const std::string where = "message.parts[" + std::to_string(i) + "]";
    if (!p.is_object()) return invalid_params(where, "must be a Part object");
    if (p.contains("kind") && !p["kind"].is_string())
      return invalid_params(where + ".kind", "must be a string");
    const std::string kind = p.value("kind", json(p.contains("text") ? "text" : "")).get<std::string>();
    if (kind == "file" || kind == "data")
      return RpcError{kContentTypeNotSupported,
                      where + ": only text parts are understood (this agent takes text/plain)"};
    if (kind != "text") return invalid_params(where + ".kind", "must be \"text\", \"file\" or \"data\"");
    if (!p.contains("text") || !p["text"].is_string())
      return invalid_params(where + ".text", "must be a string");
    json stored{{"text", p["text"]}};
    if (p.contains("metadata")) stored["metadata"] = p["metadata"];
    out.message["parts"].push_back(stored);
    if (!out.text.empty()) out.text += "\n";
    out.text += p["text"].get<std::string>();
  }
  if (m.contains("contextId") && m["contextId"].is_string())
    out.context_id = m["contextId"].get<std::string>();
  if (m.contains("taskId") && m["taskId"].is_string()) out.task_id = m["taskId"].get<std::string>();
  if (params.contains("configuration") && !params["configuration"].is_null()) {
    const json& c = params["configuration"];
    if (!c.is_object()) return invalid_params("configuration", "must be an object");
    if (c.contains("blocking") && !c["blocking"].is_null()) {
      if (!c["blocking"].is_boolean())
        return invalid_params("configuration.blocking", "must be true or false");
      out.return_immediately = !c["blocking"].get<bool>();
    }
    auto h = optional_count(c, "historyLength");
    if (auto* e = std::get_if<RpcError>(&h)) return *e;
    out.history_length = std::get<std::optional<int>>(h);
  }
  return out;
}

json task_json(const Task& t, std::optional<int> history_length) {
  json task = a2a::task_json(t, history_length);
  task["kind"] = "task";
  task["status"] = status(t, task["status"]);
  for (auto& a : task["artifacts"]) a = artifact(a);
  if (task.contains("history"))
    for (auto& m : task["history"]) m = message(m);
  return task;
}

json status_update(const Task& t) {
  json e = a2a::status_update(t)["statusUpdate"];
  e["kind"] = "status-update";
  e["status"] = status(t, e["status"]);
  e["final"] = is_terminal(t.state);
  return e;
}

json artifact_update(const Task& t, const std::string& text, bool append, bool last_chunk) {
  json e = a2a::artifact_update(t, text, append, last_chunk)["artifactUpdate"];
  e["kind"] = "artifact-update";
  e["artifact"] = artifact(e["artifact"]);
  return e;
}

void add_card_fields(json& card, bool bearer_auth) {
  if (!card.contains("supportedInterfaces") || !card["supportedInterfaces"].is_array()) return;
  std::string url;
  for (const auto& i : card["supportedInterfaces"])
    if (i.value("protocolBinding", std::string()) == "JSONRPC" && i.contains("url") && i["url"].is_string()) {
      url = i["url"].get<std::string>();
      break;
    }
  if (url.empty()) return;
  card["protocolVersion"] = "0.3.0";
  card["url"] = url;
  card["preferredTransport"] = "JSONRPC";
  card["supportedInterfaces"].push_back(
      json{{"url", url}, {"protocolBinding", "JSONRPC"}, {"protocolVersion", "0.3"}});
  if (!bearer_auth || !card.contains("securitySchemes")) return;
  json security = json::array();
  for (auto& [name, scheme] : card["securitySchemes"].items()) {
    if (!scheme.contains("httpAuthSecurityScheme")) continue;
    scheme["type"] = "http";
    scheme["scheme"] = scheme["httpAuthSecurityScheme"].value("scheme", std::string("Bearer"));
    security.push_back(json{{name, json::array()}});
  }
  card["security"] = security;
}

}  // namespace gateway::a2a::v03
