#include "a2a/a2a_api.h"

#include "a2a/a2a_json.h"
#include "a2a/a2a_v03_json.h"
#include "agent_call.h"

#include <cctype>
#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

namespace gateway::a2a {

namespace {

using ExchangePtr = std::shared_ptr<http::Exchange>;
constexpr std::string_view kCardPath = ".well-known/agent-card.json";

// "http://HOST" or "https://HOST" as the client reached the gateway.
std::string base_url(const http::Exchange& ex) {
  const std::string_view host = ex.request()[http::bhttp::field::host];
  return (ex.secure() ? "https://" : "http://") + std::string(host.empty() ? "localhost" : host);
}

// The A2A-Version the request asks for: the header, else the query parameter; empty if neither.
std::string requested_version(const http::Request& req) {
  std::string_view v = req["A2A-Version"];
  if (v.empty()) {
    const std::string_view target = req.target();
    const auto q = target.find('?');
    if (q != std::string_view::npos) {
      std::string_view query = target.substr(q + 1);
      while (!query.empty()) {
        const auto amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        if (pair.starts_with("A2A-Version=")) v = pair.substr(12);
        if (amp == std::string_view::npos) break;
        query.remove_prefix(amp + 1);
      }
    }
  }
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return std::string(v);
}

// The wire a request speaks, from its A2A-Version: none or 0.3 is A2A 0.3 (as the spec says of an
// empty version), 1.0 is A2A 1.0 (a patch number is ignored); nullopt for any other.
std::optional<Wire> wire_of(const std::string& version) {
  if (version.empty() || version == "0.3" || version.starts_with("0.3.")) return Wire::v0_3;
  if (version == "1.0" || version.starts_with("1.0.")) return Wire::v1_0;
  return std::nullopt;
}

// The objects answered, in the request's wire.
json task_out(Wire w, const Task& t, std::optional<int> history_length = std::nullopt) {
  return w == Wire::v0_3 ? v03::task_json(t, history_length) : task_json(t, history_length);
}
// SendMessage's result and a stream's first event: 1.0 wraps the task ({"task": ...}), 0.3 does not.
json task_result(Wire w, const Task& t, std::optional<int> history_length) {
  return w == Wire::v0_3 ? v03::task_json(t, history_length) : json{{"task", task_json(t, history_length)}};
}
json status_out(Wire w, const Task& t) { return w == Wire::v0_3 ? v03::status_update(t) : status_update(t); }
json artifact_out(Wire w, const Task& t, const std::string& text, bool append, bool last_chunk) {
  return w == Wire::v0_3 ? v03::artifact_update(t, text, append, last_chunk)
                         : artifact_update(t, text, append, last_chunk);
}

void respond_json(const ExchangePtr& ex, const json& body) {
  ex->respond_json(http::Status::ok, body.dump(-1, ' ', false, json::error_handler_t::replace));
}

// A stream's beginning, when it starts listening to a working task: the task, then a working
// status update.
std::function<void(const Task&)> stream_start(const ExchangePtr& ex, const json& rid, Wire w,
                                              std::optional<int> history_length) {
  return [ex, rid, w, history_length](const Task& t) {
    ex->start_stream(http::Status::ok, "text/event-stream");
    ex->send(sse_event(rid, task_result(w, t, history_length)));
    ex->send(sse_event(rid, status_out(w, t)));
  };
}

// The rest of the stream: an artifact update per piece of the reply (appending once the client
// has some of the artifact), then at the end the artifact's last chunk (the whole reply when the
// client has none of it) for a completed task, the final status, and the stream's end.
// seen: the client has part of the artifact already (the task it was sent had some reply).
Listener stream_listener(const ExchangePtr& ex, const json& rid, Wire w, std::shared_ptr<bool> seen) {
  return [ex, rid, w, seen](const Task& t, const std::string* chunk) {
    if (chunk) {
      ex->send(sse_event(rid, artifact_out(w, t, *chunk, *seen, false)));
      *seen = true;
      return;
    }
    if (t.state == TaskState::completed)
      ex->send(sse_event(rid, artifact_out(w, t, *seen ? std::string() : t.reply, *seen, true)));
    ex->send(sse_event(rid, status_out(w, t)));
    ex->end_stream();
  };
}

std::vector<CardAgent> card_agents(const std::vector<agentd::AgentInfo>& infos) {
  std::vector<CardAgent> out;
  for (const auto& a : infos) out.push_back(CardAgent{a.id, a.class_name, a.name});
  return out;
}

// A configured entry's card: its description and skills (defaults saying what it is).
std::string entry_description(const EntryConfig& e) {
  if (!e.description.empty()) return e.description;
  if (e.per_conversation())
    return "A new agentd agent of class " + e.agent_class +
           " for each conversation (contextId), reached through agentd-gateway";
  return "agentd agent '" + e.agent + "', reached through agentd-gateway";
}

json entry_skills(const EntryConfig& e) {
  json skills = json::array();
  for (const auto& s : e.skills) skills.push_back(skill_json(s));
  if (skills.empty()) {
    json tags = json::array({"agentd"});
    if (e.per_conversation()) tags.push_back(e.agent_class);
    skills.push_back(json{{"id", "reply"},
                          {"name", "reply"},
                          {"description", "The agent's reply to the text of a message"},
                          {"tags", tags}});
  }
  return skills;
}

json entry_card(const EntryConfig& e, const std::string& base, bool bearer) {
  json card = a2a::agent_card(CardAgent{e.name, e.agent_class, e.name}, base, bearer);
  card["description"] = entry_description(e);
  card["skills"] = entry_skills(e);
  return card;
}

// The gateway's card with --config: one skill per entry, with the entry's description, and the
// tags and examples of its skills.
json entries_card(const ExposureConfig& config, const std::string& base, bool bearer) {
  std::vector<CardAgent> agents;
  for (const auto& e : config.entries) agents.push_back(CardAgent{e.name, e.agent_class, e.name});
  json card = a2a::gateway_card(agents, base, bearer);
  for (std::size_t i = 0; i < config.entries.size(); ++i) {
    const EntryConfig& e = config.entries[i];
    json& skill = card["skills"][i];
    std::string about = entry_description(e);
    if (about.back() != '.') about += '.';
    skill["description"] = about + " A2A at " + base + "/a2a/" + e.name + "/, its card at " + base + "/a2a/" +
                           e.name + "/.well-known/agent-card.json";
    json tags = json::array({"agentd"});
    json examples = json::array();
    for (const auto& s : e.skills) {
      for (const auto& t : s.tags)
        if (std::find(tags.begin(), tags.end(), t) == tags.end()) tags.push_back(t);
      for (const auto& x : s.examples) examples.push_back(x);
    }
    skill["tags"] = tags;
    if (!examples.empty()) skill["examples"] = examples;
  }
  return card;
}

}  // namespace

// One JSON-RPC request in flight.
struct A2aApi::Call {
  ExchangePtr ex;
  std::string agent;
  RpcRequest req;
  Wire wire;

  void result(json r) const { ex->respond_json(http::Status::ok, rpc_result(req.id, std::move(r))); }
  void error(const RpcError& e, http::Status status = http::Status::ok) const {
    ex->respond_json(status, rpc_error(req.id, e));
  }
  // Answers a resolution that found no agent (true), or says it found one (false).
  bool failed(const Resolved& found) const {
    if (auto* e = std::get_if<agentd::Error>(&found)) {
      const bool missing = e->code() == agentd::ErrorCode::unknown_agent;
      error(rpc_error_of(*e), missing ? http::Status::not_found : http::Status::ok);
      return true;
    }
    if (auto* r = std::get_if<Refusal>(&found)) {
      switch (r->kind) {
        case Refusal::Kind::no_entry:
        case Refusal::Kind::agent_missing:
          error({kAgentNotFound, r->message}, http::Status::not_found);
          break;
        case Refusal::Kind::too_many:
          error(rpc_error_of(agentd::Error(agentd::ErrorCode::overloaded, r->message, "", "", true)),
                http::Status::too_many_requests);
          break;
        case Refusal::Kind::bad_key:
          error({kInvalidParams, "Invalid parameters: message.contextId: " + r->message});
          break;
      }
      return true;
    }
    return false;
  }
};

bool A2aApi::handle(const ExchangePtr& ex) {
  const auto& req = ex->request();
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = req.method() == http::bhttp::verb::get;
  if (path == "/.well-known/agent-card.json") {
    if (get)
      gateway_card(ex);
    else
      ex->respond_json(http::Status::method_not_allowed, rpc_error(nullptr, {kInvalidRequest, "use GET"}));
    return true;
  }
  if (!path.starts_with("/a2a/")) return false;
  std::string_view rest = path.substr(5);
  const auto slash = rest.find('/');
  const std::string agent(rest.substr(0, slash));
  const std::string_view tail = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (agent.empty() || (!tail.empty() && tail != kCardPath)) {
    ex->respond_json(http::Status::not_found,
                     rpc_error(nullptr, {kMethodNotFound, "no such A2A endpoint: " + std::string(path) +
                                                              " (an agent is at /a2a/ID/, its card at "
                                                              "/a2a/ID/.well-known/agent-card.json)"}));
    return true;
  }
  // The answer says the version it speaks: the request's, or 1.0 when that one is not served.
  ex->add_header("A2A-Version", wire_of(requested_version(req)) == Wire::v0_3 ? "0.3" : "1.0");
  if (tail == kCardPath) {
    if (!get)
      ex->respond_json(http::Status::method_not_allowed, rpc_error(nullptr, {kInvalidRequest, "use GET"}));
    else
      agent_card(ex, agent);
    return true;
  }
  if (req.method() != http::bhttp::verb::post) {
    ex->respond_json(
        http::Status::method_not_allowed,
        rpc_error(nullptr, {kInvalidRequest, "POST JSON-RPC 2.0 requests to /a2a/" + agent + "/"}));
    return true;
  }
  rpc(ex, agent);
  return true;
}

void A2aApi::gateway_card(const ExchangePtr& ex) {
  if (const ExposureConfig* config = exposure_.config())
    return respond_json(ex, entries_card(*config, base_url(*ex), bearer_auth_));
  upstream_.list_agents([ex, bearer = bearer_auth_](AgentsOrError result) {
    if (auto* e = std::get_if<agentd::Error>(&result))
      return ex->respond_json(http::Status::service_unavailable, rpc_error(nullptr, rpc_error_of(*e)));
    const auto& infos = std::get<std::vector<agentd::AgentInfo>>(result);
    respond_json(ex, a2a::gateway_card(card_agents(infos), base_url(*ex), bearer));
  });
}

void A2aApi::agent_card(const ExchangePtr& ex, const std::string& agent) {
  if (const ExposureConfig* config = exposure_.config()) {
    if (const EntryConfig* e = config->find(agent)) {
      json card = entry_card(*e, base_url(*ex), bearer_auth_);
      v03::add_card_fields(card, bearer_auth_);  // the same card serves A2A 0.3 clients
      return respond_json(ex, card);
    }
    return ex->respond_json(
        http::Status::not_found,
        rpc_error(nullptr, {kAgentNotFound, "no entry '" + agent + "' in --config " + config->path +
                                                " (it exposes: " + config->names() + ")"}));
  }
  // The listing says the agent's class and name (a lookup by id does not).
  upstream_.list_agents([ex, agent, bearer = bearer_auth_](AgentsOrError result) {
    if (auto* e = std::get_if<agentd::Error>(&result))
      return ex->respond_json(http::Status::service_unavailable, rpc_error(nullptr, rpc_error_of(*e)));
    for (const auto& a : card_agents(std::get<std::vector<agentd::AgentInfo>>(result)))
      if (a.id == agent) {
        json card = a2a::agent_card(a, base_url(*ex), bearer);
        v03::add_card_fields(card, bearer);  // the same card serves A2A 0.3 clients
        return respond_json(ex, card);
      }
    ex->respond_json(http::Status::not_found,
                     rpc_error(nullptr, {kAgentNotFound, "no agent '" + agent + "' on the server"}));
  });
}

void A2aApi::rpc(const ExchangePtr& ex, const std::string& agent) {
  auto parsed = parse_rpc(ex->request().body());
  if (auto* e = std::get_if<std::pair<json, RpcError>>(&parsed)) {
    ex->respond_json(http::Status::ok, rpc_error(e->first, e->second));
    return;
  }
  const std::string version = requested_version(ex->request());
  const auto wire = wire_of(version);
  auto call = std::make_shared<Call>(
      Call{ex, agent, std::move(std::get<RpcRequest>(parsed)), wire.value_or(Wire::v1_0)});
  if (!wire) {
    json data = json::array({json{{"@type", "type.googleapis.com/google.rpc.ErrorInfo"},
                                  {"reason", "VERSION_NOT_SUPPORTED"},
                                  {"domain", "a2a-protocol.org"},
                                  {"metadata", {{"supportedVersions", "0.3, 1.0"}}}}});
    return call->error(RpcError{kVersionNotSupported,
                                "A2A version " + version +
                                    " is not supported; this gateway serves A2A-Version: 1.0, and 0.3 "
                                    "(also when the header is absent)",
                                data});
  }
  exposure_.check(agent, [this, call](Resolved found) {
    if (!call->failed(found)) dispatch(call);
  });
}

void A2aApi::dispatch(const std::shared_ptr<Call>& call) {
  if (call->wire == Wire::v0_3) return dispatch_v03(call);
  const std::string& m = call->req.method;
  if (m.find('/') != std::string::npos)
    return call->error({kMethodNotFound, "Method not found: " + m +
                                             " is an A2A 0.3 method, and this request says A2A-Version: "
                                             "1.0 (its methods are SendMessage, GetTask, ...)"});
  if (m == "SendMessage") return send_message(call, false);
  if (m == "SendStreamingMessage") return send_message(call, true);
  if (m == "GetTask") return get_task(call);
  if (m == "ListTasks") return list_tasks(call);
  if (m == "CancelTask") return cancel_task(call);
  if (m == "SubscribeToTask") return subscribe(call);
  if (m == "GetExtendedAgentCard")
    return call->error(
        {kUnsupportedOperation, "no extended agent card (capabilities.extendedAgentCard is false)"});
  if (m == "CreateTaskPushNotificationConfig" || m == "GetTaskPushNotificationConfig" ||
      m == "ListTaskPushNotificationConfigs" || m == "DeleteTaskPushNotificationConfig")
    return call->error({kPushNotificationNotSupported, "push notifications are not supported"});
  call->error({kMethodNotFound, "Method not found: " + m});
}

void A2aApi::dispatch_v03(const std::shared_ptr<Call>& call) {
  const std::string& m = call->req.method;
  if (m == "message/send") return send_message(call, false);
  if (m == "message/stream") return send_message(call, true);
  if (m == "tasks/get") return get_task(call);
  if (m == "tasks/cancel") return cancel_task(call);
  if (m == "tasks/resubscribe") return subscribe(call);
  if (m == "agent/getAuthenticatedExtendedCard")
    return call->error({v03::kAuthenticatedExtendedCardNotConfigured,
                        "no authenticated extended agent card (supportsAuthenticatedExtendedCard is false)"});
  if (m.starts_with("tasks/pushNotificationConfig/"))
    return call->error({kPushNotificationNotSupported, "push notifications are not supported"});
  if (m.find('/') == std::string::npos && !m.empty() && std::isupper(static_cast<unsigned char>(m[0])))
    return call->error(
        {kMethodNotFound, "Method not found: " + m +
                              " is an A2A 1.0 method: send the header A2A-Version: 1.0 (a request without "
                              "it is A2A 0.3, whose methods are message/send, message/stream, tasks/get, "
                              "tasks/cancel and tasks/resubscribe)"});
  call->error({kMethodNotFound, "Method not found: " + m});
}

void A2aApi::send_message(const std::shared_ptr<Call>& call, bool streaming) {
  auto parsed = call->wire == Wire::v0_3 ? v03::parse_send_params(call->req.params)
                                         : parse_send_request(call->req.params);
  if (auto* e = std::get_if<RpcError>(&parsed)) return call->error(*e);
  auto send = std::make_shared<SendRequest>(std::move(std::get<SendRequest>(parsed)));
  if (!send->task_id.empty()) {
    // Every task here is one call: none waits for more input.
    if (!store_.get(call->agent, send->task_id))
      return call->error({kTaskNotFound, "Task not found: " + send->task_id});
    return call->error(
        {kUnsupportedOperation, "task " + send->task_id +
                                    " has ended or takes no more messages: send without taskId "
                                    "(the same contextId keeps the conversation)"});
  }
  // The agent of the conversation (a per-conversation entry's: the contextId's; a message without
  // one starts a new conversation).
  if (send->context_id.empty()) send->context_id = TaskStore::new_id();
  exposure_.resolve(call->agent, send->context_id, [this, call, send, streaming](Resolved found) {
    if (!call->failed(found)) start_task(call, send, std::get<Target>(std::move(found)), streaming);
  });
}

void A2aApi::start_task(const std::shared_ptr<Call>& call, const std::shared_ptr<SendRequest>& send,
                        Target target, bool streaming) {
  const agentd::AgentRef& agent = *target.agent;
  auto task = store_.create(call->agent, send->context_id, send->message);
  if (!task)
    return call->error({kInternalError, "the gateway holds as many tasks as it may, all still working"});
  const std::string id = task->id;
  const agentd::Msg input("user", send->text, "user");
  TaskStore& store = store_;
  try {
    if (!streaming) {
      agentd::Placeholder p = agent.with_trace_id(call->ex->trace_id()).reply(input);
      // returnImmediately: the working task now, the outcome only in the store (the exchange is
      // not held meanwhile).
      std::shared_ptr<Call> waiting = call;
      if (send->return_immediately) {
        call->result(task_result(call->wire, *task, send->history_length));
        waiting = nullptr;
      }
      await_reply(upstream_, call->ex->executor(), agent.id(), p, reply_timeout_,
                  [call = waiting, send, id, context = task->context_id, &store,
                   lease = std::move(target.lease)](Outcome outcome) {
                    std::optional<Task> t;
                    if (auto* e = std::get_if<agentd::Error>(&outcome))
                      t = store.finish(id, TaskState::failed, std::nullopt, failure_message(*e, id, context));
                    else
                      t = store.finish(id, TaskState::completed, std::get<agentd::Msg>(outcome).text(),
                                       nullptr);
                    if (!call) return;
                    if (!t) return call->error({kTaskNotFound, "Task not found: " + id});
                    call->result(task_result(call->wire, *t, send->history_length));
                  });
      return;
    }
    agentd::Placeholder p = agent.with_trace_id(call->ex->trace_id()).reply_stream(input);
    // The stream listens to the task like a SubscribeToTask stream: the chunks go through the
    // store (so a subscriber sees them too) and a cancel ends it at once.
    store_.subscribe(call->agent, id, stream_start(call->ex, call->req.id, call->wire, send->history_length),
                     stream_listener(call->ex, call->req.id, call->wire, std::make_shared<bool>(false)));
    await_stream(
        upstream_, call->ex->executor(), agent.id(), p, reply_timeout_,
        [id, &store](std::string text) { store.append(id, text); },
        [id, context = task->context_id, &store, lease = std::move(target.lease)](Outcome outcome) {
          if (auto* e = std::get_if<agentd::Error>(&outcome))
            store.finish(id, TaskState::failed, std::nullopt, failure_message(*e, id, context));
          else
            store.finish(id, TaskState::completed, std::get<agentd::Msg>(outcome).text(), nullptr);
        });
  } catch (const agentd::Error& e) {  // the client is closed: the call could not be sent
    store_.finish(id, TaskState::failed, std::nullopt, failure_message(e, id, task->context_id));
    call->error(rpc_error_of(e));
  }
}

void A2aApi::subscribe(const std::shared_ptr<Call>& call) {
  auto id = required_string(call->req.params, "id");
  if (auto* e = std::get_if<RpcError>(&id)) return call->error(*e);
  const std::string& task_id = std::get<std::string>(id);
  // Whether the client has part of the artifact is known once the snapshot is taken.
  auto seen = std::make_shared<bool>(false);
  auto start = stream_start(call->ex, call->req.id, call->wire, std::nullopt);
  auto t = store_.subscribe(
      call->agent, task_id,
      [&](const Task& now) {
        *seen = !now.reply.empty();
        start(now);
      },
      stream_listener(call->ex, call->req.id, call->wire, seen));
  if (!t) return call->error({kTaskNotFound, "Task not found: " + task_id});
  if (is_terminal(t->state))
    call->error({kUnsupportedOperation,
                 std::string("the task has ended (") +
                     (call->wire == Wire::v0_3 ? v03::state_name(t->state) : state_name(t->state)) +
                     "): " + (call->wire == Wire::v0_3 ? "tasks/get" : "GetTask") + " has its result"});
}

void A2aApi::get_task(const std::shared_ptr<Call>& call) {
  auto id = required_string(call->req.params, "id");
  if (auto* e = std::get_if<RpcError>(&id)) return call->error(*e);
  auto history = optional_count(call->req.params, "historyLength");
  if (auto* e = std::get_if<RpcError>(&history)) return call->error(*e);
  auto t = store_.get(call->agent, std::get<std::string>(id));
  if (!t) return call->error({kTaskNotFound, "Task not found: " + std::get<std::string>(id)});
  call->result(task_out(call->wire, *t, std::get<std::optional<int>>(history)));
}

void A2aApi::cancel_task(const std::shared_ptr<Call>& call) {
  auto id = required_string(call->req.params, "id");
  if (auto* e = std::get_if<RpcError>(&id)) return call->error(*e);
  auto r = store_.cancel(call->agent, std::get<std::string>(id));
  if (!r) return call->error({kTaskNotFound, "Task not found: " + std::get<std::string>(id)});
  if (!r->second)
    return call->error({kTaskNotCancelable, std::string("Task cannot be canceled: it is ") +
                                                (call->wire == Wire::v0_3 ? v03::state_name(r->first.state)
                                                                          : state_name(r->first.state))});
  call->result(task_out(call->wire, r->first));
}

void A2aApi::list_tasks(const std::shared_ptr<Call>& call) {
  const json& p = call->req.params;
  ListQuery q;
  q.agent = call->agent;
  auto bad = [&](const std::string& field, const std::string& what) {
    call->error({kInvalidParams, "Invalid parameters: " + field + ": " + what});
  };
  if (p.contains("contextId") && !p["contextId"].is_null()) {
    if (!p["contextId"].is_string()) return bad("contextId", "must be a string");
    q.context_id = p["contextId"].get<std::string>();
  }
  if (p.contains("status") && !p["status"].is_null() && p["status"] != "TASK_STATE_UNSPECIFIED") {
    if (!p["status"].is_string()) return bad("status", "must be a TaskState name");
    q.state = state_from_name(p["status"].get<std::string>());
    if (!q.state) {
      if (p["status"] == "TASK_STATE_SUBMITTED" || p["status"] == "TASK_STATE_INPUT_REQUIRED" ||
          p["status"] == "TASK_STATE_REJECTED" || p["status"] == "TASK_STATE_AUTH_REQUIRED")
        return call->result(
            json{{"tasks", json::array()}, {"nextPageToken", ""}, {"pageSize", 0}, {"totalSize", 0}});
      return bad("status", "is not a TaskState name");
    }
  }
  auto size = optional_count(p, "pageSize");
  if (auto* e = std::get_if<RpcError>(&size)) return call->error(*e);
  if (auto s = std::get<std::optional<int>>(size)) {
    if (*s < 1 || *s > 100) return bad("pageSize", "must be from 1 to 100");
    q.page_size = static_cast<std::size_t>(*s);
  }
  if (p.contains("pageToken") && !p["pageToken"].is_null()) {
    if (!p["pageToken"].is_string()) return bad("pageToken", "must be a string");
    q.page_token = p["pageToken"].get<std::string>();
  }
  if (p.contains("statusTimestampAfter") && !p["statusTimestampAfter"].is_null()) {
    auto t = p["statusTimestampAfter"].is_string()
                 ? parse_iso_time(p["statusTimestampAfter"].get<std::string>())
                 : std::nullopt;
    if (!t) return bad("statusTimestampAfter", "must be an ISO 8601 UTC time (2025-10-28T10:30:00.000Z)");
    q.updated_after = t;
  }
  auto history = optional_count(p, "historyLength");
  if (auto* e = std::get_if<RpcError>(&history)) return call->error(*e);
  bool artifacts = false;
  if (p.contains("includeArtifacts") && !p["includeArtifacts"].is_null()) {
    if (!p["includeArtifacts"].is_boolean()) return bad("includeArtifacts", "must be true or false");
    artifacts = p["includeArtifacts"].get<bool>();
  }
  auto page = store_.list(q);
  json tasks = json::array();
  for (const auto& t : page.tasks)
    tasks.push_back(task_json(t, std::get<std::optional<int>>(history), artifacts));
  call->result(json{{"tasks", tasks},
                    {"nextPageToken", page.next_page_token},
                    {"pageSize", q.page_size},
                    {"totalSize", page.total}});
}

}  // namespace gateway::a2a
