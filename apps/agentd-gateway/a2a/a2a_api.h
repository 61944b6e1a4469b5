// A2A 1.0 and 0.3, the JSON-RPC binding: every exposed entry (exposure.h: without --config every
// agent on the upstream server under its id, as the OpenAI API exposes them) at /a2a/ID/ (JSON-RPC
// 2.0 POSTed there), its agent card at /a2a/ID/.well-known/agent-card.json, and the gateway's card
// listing them at
// /.well-known/agent-card.json. a2a_json.h says how messages map onto agent calls.
//
// Methods: SendMessage (blocking by default: the answer is the finished task;
// configuration.returnImmediately answers the working task at once), SendStreamingMessage (SSE:
// the task, a working status update, one artifact update per chunk the agent streams, the final
// status update), GetTask, ListTasks, CancelTask (a stream of the task ends at once with the
// canceled status; the agent call itself cannot be stopped), SubscribeToTask (the same stream,
// from the task as it is now). GetExtendedAgentCard and the push notification methods answer the
// spec's "not supported" errors.
//
// Version: a request's `A2A-Version` (the header, or the A2A-Version query parameter) chooses the
// protocol: 1.0 the methods above, 0.3 or none (A2A 1.0 says an empty version means 0.3) A2A
// 0.3's message/send, message/stream, tasks/get, tasks/cancel and tasks/resubscribe with 0.3's
// objects (a2a_v03_json.h); any other version is VersionNotSupportedError (-32009). Answers
// carry the version they speak. Both versions share the task store, and one agent card serves
// both (its JSONRPC interfaces of versions 1.0 and 0.3 at the same URL, and 0.3's own fields).
//
// No thread waits for an agent: agent_call.h delivers the answer on the connection's strand.
#pragma once

#include "a2a/task_store.h"
#include "exposure.h"
#include "http/connection.h"
#include "upstream.h"

#include <chrono>
#include <memory>

namespace gateway::a2a {

// The protocol version a request speaks (its A2A-Version).
enum class Wire { v1_0, v0_3 };
struct SendRequest;

class A2aApi {
 public:
  // bearer_auth: the gateway wants a bearer token (the cards say so). exposure: which agent an
  // entry (the E of /a2a/E/) and a contextId reach.
  A2aApi(Upstream& upstream, Exposure& exposure, std::chrono::seconds reply_timeout, bool bearer_auth,
         TaskStore& store)
      : upstream_(upstream),
        exposure_(exposure),
        reply_timeout_(reply_timeout),
        bearer_auth_(bearer_auth),
        store_(store) {}
  // True when the path is A2A's (/a2a/..., /.well-known/agent-card.json): then answered.
  bool handle(const std::shared_ptr<http::Exchange>& ex);

 private:
  struct Call;
  void gateway_card(const std::shared_ptr<http::Exchange>& ex);
  void agent_card(const std::shared_ptr<http::Exchange>& ex, const std::string& agent);
  void rpc(const std::shared_ptr<http::Exchange>& ex, const std::string& agent);
  void dispatch(const std::shared_ptr<Call>& call);
  void dispatch_v03(const std::shared_ptr<Call>& call);
  void send_message(const std::shared_ptr<Call>& call, bool streaming);
  void start_task(const std::shared_ptr<Call>& call, const std::shared_ptr<SendRequest>& send, Target target,
                  bool streaming);
  void subscribe(const std::shared_ptr<Call>& call);
  void get_task(const std::shared_ptr<Call>& call);
  void list_tasks(const std::shared_ptr<Call>& call);
  void cancel_task(const std::shared_ptr<Call>& call);

  Upstream& upstream_;
  Exposure& exposure_;
  std::chrono::seconds reply_timeout_;
  bool bearer_auth_;
  TaskStore& store_;
};

}  // namespace gateway::a2a
