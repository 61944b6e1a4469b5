#include "rpc_server.h"

#include "agent_host.h"
#include "call_queue.h"
#include "info_codec.h"
#include "kj_errors.h"
#include "session_impl.h"
#include "trace_codec.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <algorithm>

namespace agentd::detail {

namespace {

// Writes o as a call's answer (its results' outcome), the answer's message sized for it.
template <typename Context>
void answer_outcome(Context& context, const Outcome& o, std::uint64_t inline_limit = 0) {
  write_outcome(o, context.getResults(message_size_for(outcome_size(o, inline_limit))).initOutcome(),
                inline_limit);
}

AgentInfo agent_info(const AgentInfoRow& r) {
  return AgentInfo{.id = r.id,
                   .name = r.name,
                   .class_name = r.class_name,
                   .queued_calls = r.queued,
                   .completed_calls = r.completed,
                   .failed_calls = r.failed,
                   .last_call_unix_ms = r.last_call_unix_ms,
                   .model_calls = r.model_calls,
                   .prompt_tokens = r.prompt_tokens,
                   .completion_tokens = r.completion_tokens};
}

AgentQuery::Sort read_sort(wire::AgentQuery::Sort s) {
  using W = wire::AgentQuery::Sort;
  using S = AgentQuery::Sort;
  switch (s) {
    case W::ID:
      return S::id;
    case W::NAME:
      return S::name;
    case W::CLASS_NAME:
      return S::class_name;
    case W::CALLS:
      return S::calls;
    case W::ERRORS:
      return S::errors;
    case W::QUEUED:
      return S::queued;
    case W::LAST_CALL:
      return S::last_call;
    case W::TOKENS:
      return S::tokens;
  }
  return S::id;  // a sort this server does not know (a newer client's)
}

TraceSpan trace_span(const SpanRecord& s) {
  TraceSpan t;
  t.seq = s.seq;
  t.call_id = s.call_id;
  t.agent_id = s.agent_id;
  t.agent_class = s.agent_class;
  t.kind = s.kind;
  t.method = s.method;
  t.consumed = s.consumed;
  t.enqueued_unix_ns = s.enqueued_unix_ns;
  t.queue_wait_ns = s.queue_wait_ns;
  t.run_ns = s.run_ns;
  t.model_calls = s.model_calls;
  t.prompt_tokens = s.prompt_tokens;
  t.completion_tokens = s.completion_tokens;
  t.outcome = s.outcome;
  t.error_message = s.error_message;
  t.trace_id = s.trace_id;
  t.input = s.input;
  t.output = s.output;
  t.tool_calls = s.tool_calls;
  return t;
}

// A result that failed before it reached the pool (e.g. a duplicate call id).
class FailedResult final : public wire::Result::Server {
 public:
  explicit FailedResult(Error e) : error_(std::move(e)) {}
  kj::Promise<void> get(GetContext context) override {
    write_error(error_, context.getResults().initOutcome().initError());
    return kj::READY_NOW;
  }

 private:
  Error error_;
};

class ResultImpl final : public wire::Result::Server {
 public:
  ResultImpl(RpcContext& ctx, std::string call_id) : ctx_(ctx), call_id_(std::move(call_id)) {}

  kj::Promise<void> get(GetContext context) override {
    return answer_when_ready(ctx_, call_id_, /*wait_for_unknown=*/false,
                             [context](const OutcomePtr& o) mutable {
                               answer_outcome(context, *o, context.getParams().getInlineLimit());
                             });
  }

 private:
  RpcContext& ctx_;
  std::string call_id_;
};

// One agent as a capability, a call per message: a thin adapter over queue_call(), the same
// queueing the batched Session uses. The open protocol for clients in other languages.
class AgentImpl final : public wire::Agent::Server {
 public:
  AgentImpl(RpcContext& ctx, std::string id) : ctx_(ctx), id_(std::move(id)) {}

  kj::Promise<void> reply(ReplyContext context) override {
    auto params = context.getParams();
    auto req = request(Call::Kind::reply, params.getCallId(), params.getInput());
    if (params.hasTraceId()) req.trace_id = to_std(params.getTraceId());  // checked by queue_call
    return start(context, kj::mv(req), params.getInlineLimit());
  }

  kj::Promise<void> callAsync(CallAsyncContext context) override {
    auto params = context.getParams();
    auto req = request(Call::Kind::method_async, params.getCallId(), nullptr);
    req.method = read_text(params.getMethod(), "the method name");
    req.args = read_value(params.getArgs(), "the method's args");
    if (params.hasTraceId()) req.trace_id = to_std(params.getTraceId());
    return start(context, kj::mv(req), params.getInlineLimit());
  }

  kj::Promise<void> observe(ObserveContext context) override {
    auto req = request(Call::Kind::observe, {}, context.getParams().getInput());
    if (auto refused = queue_call(ctx_, kj::mv(req), {}))
      write_error(*refused, context.getResults().initError());
    return kj::READY_NOW;
  }

  kj::Promise<void> call(CallContext context) override {
    auto params = context.getParams();
    auto req = request(Call::Kind::method, {}, nullptr);
    req.method = read_text(params.getMethod(), "the method name");
    req.args = read_value(params.getArgs(), "the method's args");
    return finish(kj::mv(req), [context](Call& c) mutable {
      auto out = context.getResults().initOutcome();
      if (c.out_error)
        write_error(*c.out_error, out.initError());
      else
        write_value(c.out_value, out.initValue());
    });
  }

  kj::Promise<void> memory(MemoryContext context) override {
    return finish(request(Call::Kind::memory, {}, nullptr), [context](Call& c) mutable {
      auto results = context.getResults();
      if (c.out_error) {
        write_error(*c.out_error, results.initError());
        return;
      }
      auto list = results.initMsgs(static_cast<unsigned>(c.out_memory.size()));
      for (unsigned i = 0; i < c.out_memory.size(); ++i) write_msg(c.out_memory[i], list[i]);
    });
  }

  kj::Promise<void> info(InfoContext context) override {
    if (auto row = ctx_.host.info(id_))
      write_agent_info(agent_info(*row), context.getResults().initAgent());
    else
      write_error(unknown_agent_error(id_), context.getResults().initError());
    return kj::READY_NOW;
  }

 private:
  CallRequest request(Call::Kind kind, capnp::Text::Reader call_id, kj::Maybe<wire::Input::Reader> input) {
    CallRequest req;
    req.kind = kind;
    req.agent_id = id_;
    req.call_id = read_text(call_id, "the call id");
    req.input = input;
    return req;
  }

  // reply / callAsync: queue the call and hand back its Result (one that only reports the error
  // when the call id was taken); answer at once (inline_limit 0) or once the call is done, with
  // the outcome inline.
  template <typename Context>
  kj::Promise<void> start(Context& context, CallRequest req, std::uint64_t inline_limit) {
    if (req.call_id.empty()) req.call_id = new_id();
    const std::string call_id = req.call_id;
    CallReport report;
    auto paf = kj::newPromiseAndFulfiller<void>();
    if (inline_limit > 0) {
      report.outcome = [context, inline_limit, f = kj::mv(paf.fulfiller)](const OutcomePtr& o) mutable {
        if (!f->isWaiting()) return;  // the caller went away
        answer_outcome(context, *o, inline_limit);
        f->fulfill();
      };
    }
    if (auto refused = queue_call(ctx_, kj::mv(req), kj::mv(report))) {
      context.getResults().setResult(kj::heap<FailedResult>(std::move(*refused)));
      return kj::READY_NOW;
    }
    context.getResults().setResult(kj::heap<ResultImpl>(ctx_, call_id));
    if (inline_limit == 0) return kj::READY_NOW;
    return kj::mv(paf.promise);
  }

  // method / memory: answer the RPC once the call has run, with what fill writes.
  kj::Promise<void> finish(CallRequest req, kj::Function<void(Call&)> fill) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    CallReport report;
    report.finished = [fill = kj::mv(fill), f = kj::mv(paf.fulfiller)](Call& c) mutable {
      if (!f->isWaiting()) return;
      fill(c);
      f->fulfill();
    };
    // method / memory are refused only by a queue limit: a fault on this protocol (overloaded).
    if (auto refused = queue_call(ctx_, kj::mv(req), kj::mv(report))) {
      const std::string why = refused->message();
      return kj::Exception(refused->code() == ErrorCode::overloaded ? kj::Exception::Type::OVERLOADED
                                                                    : kj::Exception::Type::FAILED,
                           __FILE__, __LINE__, kj::heapString(why.data(), why.size()));
    }
    return kj::mv(paf.promise);
  }

  RpcContext& ctx_;
  std::string id_;
};

class AgentServerImpl final : public wire::AgentServer::Server {
 public:
  AgentServerImpl(RpcContext& ctx, std::function<void()> on_fetch)
      : ctx_(ctx), on_fetch_(std::move(on_fetch)) {}

  // The callback create and clone answer through, fulfilling the request's promise.
  template <typename Context>
  AgentHost::CreateDone answer_created(Context context, kj::Own<kj::PromiseFulfiller<void>> done) {
    return [this, context, f = std::make_shared<kj::Own<kj::PromiseFulfiller<void>>>(kj::mv(done))](
               std::variant<AgentInfoRow, Error> r) mutable {
      if (!(*f)->isWaiting()) return;
      auto results = context.getResults();
      if (auto* row = std::get_if<AgentInfoRow>(&r)) {
        results.setId(to_kj(row->id));
        results.setAgent(kj::heap<AgentImpl>(ctx_, row->id));
      } else {
        write_error(std::get<Error>(r), results.initError());
      }
      (*f)->fulfill();
    };
  }

  kj::Promise<void> createAgent(CreateAgentContext context) override {
    auto params = context.getParams();
    auto paf = kj::newPromiseAndFulfiller<void>();
    std::variant<std::string, Error> result = Error(ErrorCode::internal, "");
    try {
      result = ctx_.host.create(
          read_text(params.getClassName(), "the class name"), read_text(params.getName(), "the agent's name"),
          read_value(params.getArgs(), "the agent's args"), read_text(params.getAgentId(), "the agent id"),
          answer_created(context, kj::mv(paf.fulfiller)));
    } catch (const Error& e) {
      result = e;
    }
    if (auto* err = std::get_if<Error>(&result)) {
      write_error(*err, context.getResults().initError());
      return kj::READY_NOW;
    }
    return kj::mv(paf.promise);
  }

  kj::Promise<void> cloneAgent(CloneAgentContext context) override {
    auto params = context.getParams();
    auto paf = kj::newPromiseAndFulfiller<void>();
    std::optional<Error> err;
    try {
      err = ctx_.host.clone(read_text(params.getSourceId(), "the source agent id"),
                            read_text(params.getName(), "the agent's name"),
                            read_text(params.getAgentId(), "the agent id"),
                            answer_created(context, kj::mv(paf.fulfiller)));
    } catch (const Error& e) {
      err = e;
    }
    if (err) {
      write_error(*err, context.getResults().initError());
      return kj::READY_NOW;
    }
    return kj::mv(paf.promise);
  }

  kj::Promise<void> agent(AgentContext context) override {
    std::string id = to_std(context.getParams().getId());
    if (ctx_.host.exists(id))
      context.getResults().setAgent(kj::heap<AgentImpl>(ctx_, id));
    else
      write_error(unknown_agent_error(id), context.getResults().initError());
    return kj::READY_NOW;
  }

  kj::Promise<void> deleteAgent(DeleteAgentContext context) override {
    std::string id = to_std(context.getParams().getId());
    if (!ctx_.host.remove(id)) {
      write_error(unknown_agent_error(id), context.getResults().initError());
      return kj::READY_NOW;
    }
    return saved();
  }

  kj::Promise<void> deleteAllAgents(DeleteAllAgentsContext context) override {
    context.getResults().setCount(ctx_.host.remove_all());
    return saved();
  }

  // Settles once what the host has submitted to the state store is committed (at once without
  // one), so a deletion is acknowledged only when a restart would not bring the agent back.
  kj::Promise<void> saved() {
    auto paf = kj::newPromiseAndFulfiller<void>();
    ctx_.host.after_saved([f = kj::mv(paf.fulfiller)]() mutable { f->fulfill(); });
    return kj::mv(paf.promise);
  }

  kj::Promise<void> listAgents(ListAgentsContext context) override {
    auto rows = ctx_.host.list();
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    auto list = context.getResults().initAgents(static_cast<unsigned>(rows.size()));
    for (unsigned i = 0; i < rows.size(); ++i) write_agent_info(agent_info(rows[i]), list[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> queryAgents(QueryAgentsContext context) override {
    const auto q = context.getParams().getQuery();
    AgentQuery query{.search = to_std(q.getSearch()),
                     .class_name = to_std(q.getClassName()),
                     .sort = read_sort(q.getSort()),
                     .descending = q.getDescending(),
                     .offset = q.getOffset(),
                     .limit = q.getLimit()};
    const AgentPageRows page = ctx_.host.query(query);
    auto results = context.getResults();
    results.setMatched(page.matched);
    results.setTotal(page.total);
    auto list = results.initAgents(static_cast<unsigned>(page.rows.size()));
    for (unsigned i = 0; i < page.rows.size(); ++i) write_agent_info(agent_info(page.rows[i]), list[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> info(InfoContext context) override {
    if (ctx_.server_info) write_server_info(ctx_.server_info(), context.getResults().initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> fetch(FetchContext context) override {
    if (on_fetch_) {
      on_fetch_();
      on_fetch_ = nullptr;
    }
    return answer_when_ready(ctx_, to_std(context.getParams().getCallId()),
                             /*wait_for_unknown=*/true,
                             [context](const OutcomePtr& o) mutable { answer_outcome(context, *o); });
  }

  kj::Promise<void> ping(PingContext) override { return kj::READY_NOW; }

  kj::Promise<void> session(SessionContext context) override {
    context.getResults().setSession(make_session(ctx_, context.getParams().getSink()));
    return kj::READY_NOW;
  }

  kj::Promise<void> traces(TracesContext context) override {
    auto spans = ctx_.host.recent_spans(context.getParams().getLimit());
    auto list = context.getResults().initSpans(static_cast<unsigned>(spans.size()));
    for (unsigned i = 0; i < spans.size(); ++i) write_trace_span(trace_span(spans[i]), list[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> stop(StopContext) override {
    if (ctx_.request_stop) ctx_.request_stop();
    return kj::READY_NOW;
  }

  kj::Promise<void> listTools(ListToolsContext context) override {
    if (!ctx_.list_tools) return kj::READY_NOW;
    return ctx_.list_tools(context.getParams().getStart())
        .then([context](std::vector<ToolServerInfo> servers) mutable {
          auto list = context.getResults().initServers(static_cast<unsigned>(servers.size()));
          for (unsigned i = 0; i < servers.size(); ++i) write_tool_server_info(servers[i], list[i]);
        });
  }

  kj::Promise<void> callTool(CallToolContext context) override {
    auto p = context.getParams();
    if (!ctx_.call_tool) {
      write_error(Error(ErrorCode::tool_error, "this server has no tool servers"),
                  context.getResults().initError());
      return kj::READY_NOW;
    }
    std::optional<std::chrono::milliseconds> timeout;
    if (p.getTimeoutMs() > 0) timeout = std::chrono::milliseconds(p.getTimeoutMs());
    Value args = p.hasArgs() ? read_value(p.getArgs()) : Value::object();
    return ctx_.call_tool(to_std(p.getServer()), to_std(p.getTool()), std::move(args), timeout)
        .then(
            [context](ToolResult r) mutable { write_value(r.to_value(), context.getResults().initResult()); },
            [context](kj::Exception&& e) mutable {
              write_error(error_from_kj(e), context.getResults().initError());
            });
  }

  kj::Promise<void> setModelConfigs(SetModelConfigsContext context) override {
    try {
      if (!ctx_.set_model_configs)
        throw Error(ErrorCode::bad_request, "this server does not accept model configs");
      context.getResults().setVersion(ctx_.set_model_configs(to_std(context.getParams().getYaml())));
    } catch (const Error& e) {
      write_error(e, context.getResults().initError());
    }
    return kj::READY_NOW;
  }

 private:
  RpcContext& ctx_;
  std::function<void()> on_fetch_;
};

}  // namespace

wire::AgentServer::Client make_agent_server(RpcContext& ctx, std::function<void()> on_fetch) {
  return kj::heap<AgentServerImpl>(ctx, std::move(on_fetch));
}

}  // namespace agentd::detail
