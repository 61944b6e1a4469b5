// One way into the host for every call the server's RPC objects take, whichever path it came by
// (the batched Session or the per-capability Agent). Its outcome is written with
// wire/outcome_codec.h. Loop thread only.
#pragma once

#include "agent_host.h"
#include "outcome_codec.h"
#include "rpc_server.h"

#include "agentd.capnp.h"

#include <kj/function.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace agentd::detail {

// What one call asks for. reply and method_async need call_id (the result pool key).
struct CallRequest {
  Call::Kind kind = Call::Kind::reply;
  std::string agent_id;
  std::string call_id;
  kj::Maybe<wire::Input::Reader> input;  // reply / observe; read before queue_call returns
  std::string method;                    // method / method_async
  Value args;                            // method / method_async
  // reply / method_async: the caller reads chunks (loop thread; see Call::on_chunk).
  std::function<void(std::string&& chunk)> on_chunk;
  // The caller's deadline after the call is queued (Call::timeout); 0: the server's defaults.
  std::chrono::milliseconds timeout{0};
  // The caller's trace (CallSpec.traceId), for the call's span; empty: none.
  std::string trace_id;
};

// How the outcome comes back, on the loop thread. What is left unset is not reported.
struct CallReport {
  // reply / method_async: the outcome once it is in the pool.
  std::optional<kj::Function<void(const OutcomePtr&)>> outcome;
  // method / memory: the finished call (out_value, out_memory or out_error set).
  std::optional<kj::Function<void(Call&)>> finished;
};

// Queues req on its agent (an unknown agent fails reply / method / memory through their
// report, as any failure of the call does). Returns the error instead, reporting nothing, when
// the call cannot be queued at all: no call id, a call id already used, observe of an unknown
// agent, an input message that cannot be read (bad_request: nested deeper than kMaxValueDepth,
// text that is not UTF-8), a trace id that is not one (bad_request), or a queue limit reached
// (overloaded: nothing of the call is recorded, so the same call may come again).
std::optional<Error> queue_call(RpcContext& ctx, CallRequest req, CallReport report);

// Parts of a call that every way in sets up alike (queue_call, and the server's lanes,
// server/lanes.h, which take replies on threads of their own):
// - msg read as call's input; the error to answer instead when it cannot be read;
std::optional<Error> read_input(wire::Msg::Reader msg, const std::string& agent_id, Call& call);
// - the caller's deadline after the call is queued (AgentRef::with_timeout); 0: the server's;
void set_caller_timeout(Call& call, std::chrono::milliseconds timeout);
// - the error for a call id already announced on this server (pending, finished or evicted).
Error duplicate_call_id(const AgentHost& host, const std::string& call_id, const std::string& agent_id);

// Answers an RPC once the outcome of call_id is there: write (on the loop thread) fills the
// RPC's results, unless the caller went away first. The returned promise is the RPC's.
kj::Promise<void> answer_when_ready(RpcContext& ctx, const std::string& call_id, bool wait_for_unknown,
                                    kj::Function<void(const OutcomePtr&)> write);

}  // namespace agentd::detail
