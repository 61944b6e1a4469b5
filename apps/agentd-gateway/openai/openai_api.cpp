#include "openai/openai_api.h"

#include "agent_call.h"
#include "openai/chat_mapping.h"

#include <chrono>
#include <optional>
#include <utility>

namespace gateway::openai {

namespace {

using ExchangePtr = std::shared_ptr<http::Exchange>;

void send_error(const ExchangePtr& ex, const ErrorReply& e) { ex->respond_json(e.status, e.body); }

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// lease: held until the answer is sent (a conversation's agent is not deleted meanwhile).
void stream_completion(Upstream& upstream, const ExchangePtr& ex, const agentd::AgentRef& agent,
                       const ChatRequest& req, std::chrono::seconds timeout, std::shared_ptr<void> lease) {
  // The call is recorded in the request's trace (its span on the server carries the id).
  agentd::Placeholder p = agent.with_trace_id(ex->trace_id()).reply_stream(req.input);
  const std::string id = "chatcmpl-" + p.call_id();
  const std::int64_t created = unix_now();
  // The header and the first chunk are queued before the agent's chunks (await_stream).
  ex->start_stream(http::Status::ok, "text/event-stream");
  const std::string role = "assistant";
  ex->send(chunk_event(id, req.model, created, &role, nullptr, nullptr));
  await_stream(
      upstream, ex->executor(), agent.id(), p, timeout,
      [ex, id, model = req.model, created](std::string text) {
        ex->send(chunk_event(id, model, created, nullptr, &text, nullptr));
      },
      [ex, id, model = req.model, created, include_usage = req.include_usage,
       lease = std::move(lease)](Outcome outcome) {
        if (auto* e = std::get_if<agentd::Error>(&outcome)) {
          ex->send(error_event(*e, model));
        } else {
          ex->send(chunk_event(id, model, created, nullptr, nullptr, "stop"));
          // OpenAI's convention: with stream_options.include_usage, a last chunk without choices.
          if (include_usage) ex->send(usage_event(id, model, created, outcome.usage));
        }
        ex->send(kDoneEvent);
        ex->end_stream();
      });
}

void plain_completion(Upstream& upstream, const ExchangePtr& ex, const agentd::AgentRef& agent,
                      const ChatRequest& req, std::chrono::seconds timeout, std::shared_ptr<void> lease) {
  agentd::Placeholder p = agent.with_trace_id(ex->trace_id()).reply(req.input);
  // Past the deadline the request is answered 504 (the reply, if it comes later, is dropped).
  await_reply(upstream, ex->executor(), agent.id(), p, timeout,
              [ex, model = req.model, id = "chatcmpl-" + p.call_id(), created = unix_now(),
               lease = std::move(lease)](Outcome outcome) {
                if (auto* e = std::get_if<agentd::Error>(&outcome))
                  return send_error(ex, error_reply(*e, model));
                ex->respond_json(http::Status::ok,
                                 completion_json(id, model, created, std::get<agentd::Msg>(outcome).text(),
                                                 outcome.usage));
              });
}

// A refusal of the gateway's own (an unknown model, too many conversations, ...).
ErrorReply refusal_reply(const Refusal& r) {
  const char* code = "invalid_request";
  switch (r.kind) {
    case Refusal::Kind::no_entry:
      code = "model_not_found";
      break;
    case Refusal::Kind::agent_missing:
      code = "agent_not_found";
      break;
    case Refusal::Kind::too_many:
      code = "too_many_conversations";
      break;
    case Refusal::Kind::bad_key:
      break;
  }
  return invalid_request(static_cast<Status>(r.http_status()), r.message, code);
}

}  // namespace

void OpenAiApi::handle(const ExchangePtr& ex) {
  const auto& req = ex->request();
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/v1/models") {
    if (req.method() != http::bhttp::verb::get)
      return send_error(ex, invalid_request(http::Status::method_not_allowed, "use GET /v1/models"));
    return list_models(ex);
  }
  if (path == "/v1/chat/completions") {
    if (req.method() != http::bhttp::verb::post)
      return send_error(ex,
                        invalid_request(http::Status::method_not_allowed, "use POST /v1/chat/completions"));
    return chat_completions(ex);
  }
  send_error(ex,
             invalid_request(http::Status::not_found, "no such endpoint: " + std::string(path), "not_found"));
}

void OpenAiApi::list_models(const ExchangePtr& ex) {
  if (const ExposureConfig* config = exposure_.config()) {
    std::vector<ModelEntry> models;
    for (const auto& e : config->entries)
      models.push_back(ModelEntry{e.name, e.agent_class, "", e.agent, e.description});
    return ex->respond_json(http::Status::ok, models_json(models));
  }
  upstream_.list_agents([ex](AgentsOrError result) {
    if (auto* e = std::get_if<agentd::Error>(&result)) return send_error(ex, error_reply(*e, ""));
    std::vector<ModelEntry> models;
    for (const auto& a : std::get<std::vector<agentd::AgentInfo>>(result))
      models.push_back(ModelEntry{a.id, a.class_name, a.name, "", ""});
    ex->respond_json(http::Status::ok, models_json(models));
  });
}

void OpenAiApi::chat_completions(const ExchangePtr& ex) {
  auto parsed = parse_chat_request(ex->request().body());
  if (auto* e = std::get_if<ErrorReply>(&parsed)) return send_error(ex, *e);
  auto req = std::make_shared<ChatRequest>(std::move(std::get<ChatRequest>(parsed)));
  // The conversation key (per-conversation entries): the X-Conversation-Id header, else `user`;
  // neither: a one-shot agent for this completion.
  std::string key(ex->request()["X-Conversation-Id"]);
  if (key.empty()) key = req->user;
  exposure_.resolve(req->model, key, [this, ex, req](Resolved found) {
    if (auto* e = std::get_if<agentd::Error>(&found)) return send_error(ex, error_reply(*e, req->model));
    if (auto* r = std::get_if<Refusal>(&found)) return send_error(ex, refusal_reply(*r));
    auto& target = std::get<Target>(found);
    const auto& agent = *target.agent;
    try {
      if (req->stream)
        stream_completion(upstream_, ex, agent, *req, reply_timeout_, std::move(target.lease));
      else
        plain_completion(upstream_, ex, agent, *req, reply_timeout_, std::move(target.lease));
    } catch (const agentd::Error& e) {  // the client is closed: the call could not be sent
      send_error(ex, error_reply(e, req->model));
    }
  });
}

}  // namespace gateway::openai
