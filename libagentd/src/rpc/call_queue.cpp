#include "call_queue.h"

#include "peer_pool.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <fmt/format.h>

namespace agentd::detail {

namespace {

// Queues call on agent_id with its input: a message at once, a placeholder once it resolves
// (from this server's results, or fetched from its origin over a peer connection).
void enqueue_with_input(RpcContext& ctx, const std::string& agent_id, std::shared_ptr<Call> call,
                        kj::Maybe<wire::Input::Reader> maybe_input) {
  wire::Input::Reader input;
  KJ_IF_MAYBE (in, maybe_input) {
    input = *in;
  }
  switch (input.which()) {
    case wire::Input::NONE:
      ctx.host.enqueue(agent_id, kj::mv(call));
      return;
    case wire::Input::MSG:
      if (!call->input) call->input = std::make_shared<const Outcome>(read_msg(input.getMsg()));
      ctx.host.enqueue(agent_id, kj::mv(call));
      return;
    case wire::Input::PLACEHOLDER:
      break;
  }
  auto ref = input.getPlaceholder();
  std::string producer_call = to_std(ref.getCallId());
  call->consumed.push_back(producer_call);  // for its trace span
  call->input_ready = false;
  ctx.host.enqueue(agent_id, call);
  std::string server_id = to_std(ref.getServerId());
  if (server_id == ctx.server_id) {
    // Produced here: the producer's completion hands the result over directly.
    ctx.host.feed_from_result(producer_call, agent_id, call);
  } else {
    // Produced elsewhere: fetch it from the origin server over a peer connection.
    ctx.peers.fetch(to_std(ref.getOrigin()), server_id, producer_call, ctx.host.input_waiter(agent_id, call));
  }
}

}  // namespace

std::optional<Error> read_input(wire::Msg::Reader msg, const std::string& agent_id, Call& call) {
  try {
    call.input = std::make_shared<const Outcome>(read_msg(msg));
  } catch (const Error& e) {
    return Error(e.code(), e.message(), agent_id);
  } catch (const kj::Exception& e) {
    return unreadable(e, "the input message");
  }
  return std::nullopt;
}

void set_caller_timeout(Call& call, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return;
  call.timeout = timeout;
  call.timeout_by = "the caller's AgentRef::with_timeout";
}

Error duplicate_call_id(const AgentHost& host, const std::string& call_id, const std::string& agent_id) {
  return Error(ErrorCode::duplicate_call_id,
               fmt::format("call id {} was already used on this server; call ids must be unique", call_id),
               agent_id, host.class_of(agent_id));
}

std::optional<Error> queue_call(RpcContext& ctx, CallRequest req, CallReport report) {
  if (!req.trace_id.empty()) {
    if (auto why = trace_id_problem(req.trace_id); !why.empty())
      return Error(ErrorCode::bad_request, "the call's trace id was refused: " + why, req.agent_id);
  }
  // Refused before anything is recorded: the client may send the same call again.
  if (auto full = ctx.host.admit(req.agent_id)) return full;
  auto call = std::make_shared<Call>();
  call->kind = req.kind;
  call->trace_id = std::move(req.trace_id);
  call->method = std::move(req.method);
  call->args = std::move(req.args);
  // The input message is read (and refused, when it cannot be) before anything is recorded.
  KJ_IF_MAYBE (in, req.input) {
    if (in->isMsg() && (req.kind == Call::Kind::reply || req.kind == Call::Kind::observe)) {
      if (auto unread = read_input(in->getMsg(), req.agent_id, *call)) return unread;
    }
  }
  set_caller_timeout(*call, req.timeout);
  switch (req.kind) {
    case Call::Kind::reply:
    case Call::Kind::method_async: {
      if (req.call_id.empty()) return Error(ErrorCode::bad_request, "a reply without a call id");
      if (!ctx.host.announce_result(req.call_id, req.agent_id))
        return duplicate_call_id(ctx.host, req.call_id, req.agent_id);
      call->call_id = req.call_id;
      call->on_chunk = std::move(req.on_chunk);
      // Before the call is queued, so its outcome cannot be evicted unseen.
      if (report.outcome)
        ctx.host.when_result(req.call_id, kj::mv(*report.outcome), /*wait_for_unknown=*/false);
      if (req.kind == Call::Kind::method_async) req.input = nullptr;
      break;
    }
    case Call::Kind::observe:
      if (!ctx.host.exists(req.agent_id)) return unknown_agent_error(req.agent_id);
      break;
    case Call::Kind::method:
    case Call::Kind::memory:
      req.input = nullptr;
      if (report.finished) {
        call->on_done = kj::mv(*report.finished);
        call->has_on_done = true;
      }
      break;
    case Call::Kind::snapshot:  // the host's own (clone), never from the wire
      return Error(ErrorCode::bad_request, "not a call kind clients may send");
  }
  enqueue_with_input(ctx, req.agent_id, kj::mv(call), req.input);
  return std::nullopt;
}

kj::Promise<void> answer_when_ready(RpcContext& ctx, const std::string& call_id, bool wait_for_unknown,
                                    kj::Function<void(const OutcomePtr&)> write) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  ctx.host.when_result(
      call_id,
      [f = kj::mv(paf.fulfiller), write = kj::mv(write)](const OutcomePtr& o) mutable {
        if (!f->isWaiting()) return;  // the caller went away
        write(o);
        f->fulfill();
      },
      wait_for_unknown);
  return kj::mv(paf.promise);
}

}  // namespace agentd::detail
