// Fuzzes agentd-gateway's request handling short of the network (apps/agentd-gateway): each input
// is the bytes a client sends, parsed by Beast's request parser with the gateway's limits, and
// the body of what parses is mapped onto an agent call (openai/chat_mapping: the OpenAI request
// checks), then its answers are built (the completion, chunk events, the error shapes). The same
// body goes through the A2A mapping (a2a/a2a_json: JSON-RPC, SendMessageRequest, the task and
// event objects, a task store's listing), and through A2A 0.3's (a2a/a2a_v03_json: MessageSendParams,
// its objects made from the stored 1.0 ones, the card's 0.3 fields). Nothing may crash, leak or trip a
// sanitizer; bad input must end as a parse error, a 400, or a JSON-RPC error with one of the spec's codes.
#include "a2a/a2a_json.h"
#include "a2a/a2a_v03_json.h"
#include "a2a/task_store.h"
#include "openai/chat_mapping.h"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

namespace bhttp = boost::beast::http;
using namespace gateway::openai;

namespace {

namespace a2a = gateway::a2a;

// A2A 0.3's params: a message/send converted to the stored (1.0) form, then answered as 0.3's
// objects (and as 1.0's: a task made over 0.3 is readable over 1.0).
void fuzz_a2a_v03(const a2a::RpcRequest& req) {
  auto send = a2a::v03::parse_send_params(req.params);
  if (auto* e = std::get_if<a2a::RpcError>(&send)) {
    if (e->code != a2a::kInvalidParams && e->code != a2a::kContentTypeNotSupported) std::abort();
    (void)a2a::rpc_error(req.id, *e);
    return;
  }
  const auto& s = std::get<a2a::SendRequest>(send);
  if (!s.message.is_object() || s.message.contains("kind") || !s.message["parts"].is_array()) std::abort();
  a2a::TaskStore store(2, std::chrono::seconds(60));
  auto task = store.create("agent", s.context_id, s.message);
  if (!task) std::abort();
  (void)a2a::sse_event(req.id, a2a::v03::task_json(*task, s.history_length));
  (void)a2a::sse_event(req.id, a2a::v03::status_update(*task));
  store.append(task->id, s.text);
  const agentd::Error failed(agentd::ErrorCode::agent_failed, s.text, "agent");
  auto done = store.finish(task->id, a2a::TaskState::failed, std::nullopt,
                           a2a::failure_message(failed, task->id, task->context_id));
  const a2a::json t = a2a::v03::task_json(*done, s.history_length);
  if (t["kind"] != "task" || t["status"]["state"] != "failed") std::abort();
  (void)a2a::rpc_result(req.id, t);
  (void)a2a::rpc_result(req.id, a2a::task_json(*done, s.history_length));
  (void)a2a::sse_event(req.id, a2a::v03::artifact_update(*done, s.text, true, true));
  if (a2a::v03::status_update(*done)["final"] != true) std::abort();
  (void)a2a::v03::message(req.params.contains("message") ? req.params["message"] : req.params);
  a2a::json card = a2a::agent_card(a2a::CardAgent{s.context_id, s.text, s.task_id}, "http://h", true);
  a2a::v03::add_card_fields(card, true);
  if (card["protocolVersion"] != "0.3.0" || card["security"].empty()) std::abort();
}

// A body as /a2a/ID/ sees it: the JSON-RPC envelope, the method's params, the objects answered.
void fuzz_a2a(const std::string& body) {
  auto rpc = a2a::parse_rpc(body);
  if (auto* e = std::get_if<std::pair<a2a::json, a2a::RpcError>>(&rpc)) {
    const int c = e->second.code;
    if (c != a2a::kParseError && c != a2a::kInvalidRequest && c != a2a::kInvalidParams) std::abort();
    (void)a2a::rpc_error(e->first, e->second);
    return;
  }
  const auto& req = std::get<a2a::RpcRequest>(rpc);
  (void)a2a::optional_count(req.params, "historyLength");
  (void)a2a::required_string(req.params, "id");
  if (req.params.contains("statusTimestampAfter") && req.params["statusTimestampAfter"].is_string())
    (void)a2a::parse_iso_time(req.params["statusTimestampAfter"].get<std::string>());
  fuzz_a2a_v03(req);
  auto send = a2a::parse_send_request(req.params);
  if (auto* e = std::get_if<a2a::RpcError>(&send)) {
    if (e->code != a2a::kInvalidParams && e->code != a2a::kContentTypeNotSupported) std::abort();
    (void)a2a::rpc_error(req.id, *e);
    return;
  }
  const auto& s = std::get<a2a::SendRequest>(send);
  a2a::TaskStore store(2, std::chrono::seconds(60));
  auto task = store.create("agent", s.context_id, s.message);
  if (!task) std::abort();  // an empty store always takes a task
  store.append(task->id, s.text);
  const agentd::Error failed(agentd::ErrorCode::agent_failed, s.text, "agent");
  auto done = store.finish(task->id, a2a::TaskState::failed, std::nullopt,
                           a2a::failure_message(failed, task->id, task->context_id));
  (void)a2a::rpc_result(req.id, a2a::task_json(*done, s.history_length));
  (void)a2a::sse_event(req.id, a2a::artifact_update(*done, s.text, true, true));
  (void)a2a::sse_event(req.id, a2a::status_update(*done));
  a2a::ListQuery q;
  q.agent = "agent";
  q.context_id = s.context_id;
  q.page_token = s.text;
  (void)store.list(q);
  (void)a2a::agent_card(a2a::CardAgent{s.context_id, s.text, s.task_id}, "http://h", true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(64 * 1024);
  parser.eager(true);
  boost::beast::error_code ec;
  std::size_t used = 0;
  while (used < size && !parser.is_done()) {
    const std::size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == bhttp::error::need_more) break;
    if (ec) return 0;  // malformed: the gateway answers 400 / 413 / 431 and closes
    if (n == 0) break;
    used += n;
  }
  // The body as the OpenAI routes see it: the parsed body when the request is whole, otherwise
  // the raw bytes (the mapping must hold on anything).
  const std::string body =
      parser.is_done() ? parser.get().body() : std::string(reinterpret_cast<const char*>(data), size);
  fuzz_a2a(body);
  auto parsed = parse_chat_request(body);
  if (auto* e = std::get_if<ErrorReply>(&parsed)) {
    if (e->status != Status::bad_request) std::abort();  // a bad body is always a 400
    return 0;
  }
  const auto& req = std::get<ChatRequest>(parsed);
  const std::string text = req.input.text();
  const std::string role = "assistant";
  (void)completion_json("chatcmpl-x", req.model, 0, text);
  (void)chunk_event("chatcmpl-x", req.model, 0, &role, &text, "stop");
  const agentd::Error failed(agentd::ErrorCode::agent_failed, text, req.model);
  (void)error_event(failed, req.model);
  (void)error_reply(agentd::Error(agentd::ErrorCode::unknown_agent, text), req.model);
  (void)models_json({ModelEntry{req.model, text, req.input.name}});
  return 0;
}
