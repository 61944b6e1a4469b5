// The OpenAI-compatible API under /v1: GET /v1/models and POST /v1/chat/completions, answered
// through agent calls on the upstream server (chat_mapping.h says how a request maps onto a
// call).
//
// No thread waits for an agent: a completion sends the call and returns; agent_call.h delivers
// the answer (and a stream's chunks) on the connection's strand, where it is written.
#pragma once

#include "exposure.h"
#include "http/connection.h"
#include "upstream.h"

#include <chrono>
#include <memory>

namespace gateway::openai {

class OpenAiApi {
 public:
  // reply_timeout: how long a completion waits for the agent (then 504, or a timeout error
  // event ending the stream). exposure: which agent a `model` is (both outlive this object).
  OpenAiApi(Upstream& upstream, Exposure& exposure, std::chrono::seconds reply_timeout)
      : upstream_(upstream), exposure_(exposure), reply_timeout_(reply_timeout) {}
  // Answers a request whose path starts with /v1/ (404 for paths it does not serve).
  void handle(const std::shared_ptr<http::Exchange>& ex);

 private:
  void list_models(const std::shared_ptr<http::Exchange>& ex);
  void chat_completions(const std::shared_ptr<http::Exchange>& ex);

  Upstream& upstream_;
  Exposure& exposure_;
  std::chrono::seconds reply_timeout_;
};

}  // namespace gateway::openai
