// Fuzzes agentd-gateway's request handling short of the network (apps/agentd-gateway): each input
// is the bytes a client sends, parsed by Beast's request parser with the gateway's limits, and
// the body of what parses is mapped onto an agent call (openai/chat_mapping: the OpenAI request
// checks), then its answers are built (the completion, chunk events, the error shapes). Nothing
// may crash, leak or trip a sanitizer; bad input must end as a parse error or a 400.
#include "openai/chat_mapping.h"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

namespace bhttp = boost::beast::http;
using namespace gateway::openai;

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
