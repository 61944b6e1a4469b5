#include "rpc_server.h"

#include "agent_host.h"
#include "call_queue.h"
#include "model_registry.h"
#include "peer_pool.h"
#include "plugin_loader.h"
#include "session_impl.h"
#include "value_codec.h"
#include "wire_limits.h"
#include "worker_pool.h"

#include <agentd/version.h>

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

namespace agentd::detail {

namespace {

void write_row(const AgentInfoRow& r, wire::AgentInfo::Builder out) {
  out.setId(to_kj(r.id));
  out.setName(to_kj(r.name));
  out.setClassName(to_kj(r.class_name));
  out.setQueuedCalls(r.queued);
  out.setCompletedCalls(r.completed);
  out.setFailedCalls(r.failed);
}

std::uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
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
                               write_outcome(*o, context.getResults().initOutcome(),
                                             context.getParams().getInlineLimit());
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
    return start(context, request(Call::Kind::reply, params.getCallId(), params.getInput()),
                 params.getInlineLimit());
  }

  kj::Promise<void> callAsync(CallAsyncContext context) override {
    auto params = context.getParams();
    auto req = request(Call::Kind::method_async, params.getCallId(), nullptr);
    req.method = read_text(params.getMethod(), "the method name");
    req.args = read_value(params.getArgs(), "the method's args");
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
      write_row(*row, context.getResults().initAgent());
    else
      write_error(unknown_agent_error(id_), context.getResults().initError());
    return kj::READY_NOW;
  }

 private:
  CallRequest request(Call::Kind kind, capnp::Text::Reader call_id,
                      kj::Maybe<wire::Input::Reader> input) {
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
        write_outcome(*o, context.getResults().initOutcome(), inline_limit);
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
      return kj::Exception(refused->code() == ErrorCode::overloaded
                               ? kj::Exception::Type::OVERLOADED
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
    return [this, context, f = std::make_shared<kj::Own<kj::PromiseFulfiller<void>>>(
                               kj::mv(done))](std::variant<AgentInfoRow, Error> r) mutable {
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
      result = ctx_.host.create(read_text(params.getClassName(), "the class name"),
                                read_text(params.getName(), "the agent's name"),
                                read_value(params.getArgs(), "the agent's args"),
                                read_text(params.getAgentId(), "the agent id"),
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
      write_error(Error(ErrorCode::unknown_agent, fmt::format("no agent '{}' on this server", id), id),
                  context.getResults().initError());
    return kj::READY_NOW;
  }

  kj::Promise<void> deleteAgent(DeleteAgentContext context) override {
    std::string id = to_std(context.getParams().getId());
    if (!ctx_.host.remove(id)) {
      write_error(Error(ErrorCode::unknown_agent, fmt::format("no agent '{}' on this server", id), id),
                  context.getResults().initError());
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
    for (unsigned i = 0; i < rows.size(); ++i) write_row(rows[i], list[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> info(InfoContext context) override {
    auto out = context.getResults().initInfo();
    out.setServerId(to_kj(ctx_.server_id));
    out.setVersion(AGENTD_VERSION_STRING);
    out.setPid(::getpid());
    out.setUptimeSeconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx_.started).count());
    out.setRssBytes(rss_bytes());
    out.setCpuSeconds(cpu_seconds());
    out.setAgentCount(ctx_.host.size());
    const auto results = ctx_.host.result_stats();
    out.setPoolSize(results.size);
    out.setAdvertiseAddress(to_kj(ctx_.advertise_address));
    auto names = ctx_.catalog.names();
    auto classes = out.initClasses(static_cast<unsigned>(names.size()));
    for (unsigned i = 0; i < names.size(); ++i) classes.set(i, to_kj(names[i]));
    out.setWorkers(static_cast<std::uint32_t>(ctx_.workers.threads()));
    out.setWorkersBusy(static_cast<std::uint32_t>(ctx_.workers.busy()));
    out.setWorkersMax(static_cast<std::uint32_t>(ctx_.workers.max_threads()));
    const auto watch = ctx_.host.watch_stats();
    out.setCallsSlow(watch.slow_now);
    out.setCallsSlowTotal(watch.slow_total);
    out.setCallsTimedOut(watch.timed_out);
    out.setCallsCompleted(ctx_.host.calls_completed());
    out.setCallsFailed(ctx_.host.calls_failed());
    out.setCallsQueued(ctx_.host.queued_calls());
    out.setMaxPoolSize(results.limits.max_size);
    out.setMaxExpireSeconds(results.limits.max_age.count() / 1000.0);
    auto models = ctx_.models.names();
    auto ml = out.initModelConfigs(static_cast<unsigned>(models.size()));
    for (unsigned i = 0; i < models.size(); ++i) ml.set(i, to_kj(models[i]));
    out.setModelConfigVersion(ctx_.models.version());
    const ModelUsage usage = ctx_.models.total_usage();
    out.setModelCalls(usage.calls);
    out.setModelErrors(usage.errors);
    out.setModelPromptTokens(usage.prompt_tokens);
    out.setModelCompletionTokens(usage.completion_tokens);
    if (ctx_.store != nullptr) {
      const auto st = ctx_.store->stats();
      out.setStateDir(to_kj(ctx_.store->dir()));
      out.setStateBytes(st.bytes);
      out.setStateLastCommitUnixMs(st.last_commit_unix_ms);
      out.setStateError(to_kj(st.error));
    }
    if (ctx_.bytes != nullptr) {
      out.setBytesClientIn(ctx_.bytes->client.in);
      out.setBytesClientOut(ctx_.bytes->client.out);
      out.setBytesPeerIn(ctx_.bytes->peer.in);
      out.setBytesPeerOut(ctx_.bytes->peer.out);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> fetch(FetchContext context) override {
    if (on_fetch_) {
      on_fetch_();
      on_fetch_ = nullptr;
    }
    return answer_when_ready(ctx_, to_std(context.getParams().getCallId()),
                             /*wait_for_unknown=*/true, [context](const OutcomePtr& o) mutable {
                               write_outcome(*o, context.getResults().initOutcome());
                             });
  }

  kj::Promise<void> ping(PingContext) override { return kj::READY_NOW; }

  kj::Promise<void> session(SessionContext context) override {
    context.getResults().setSession(make_session(ctx_, context.getParams().getSink()));
    return kj::READY_NOW;
  }

  kj::Promise<void> traces(TracesContext context) override {
    auto spans = ctx_.host.recent_spans(context.getParams().getLimit());
    auto list = context.getResults().initSpans(static_cast<unsigned>(spans.size()));
    for (unsigned i = 0; i < spans.size(); ++i) {
      const SpanRecord& s = spans[i];
      auto out = list[i];
      out.setCallId(to_kj(s.call_id));
      out.setAgentId(to_kj(s.agent_id));
      out.setAgentClass(to_kj(s.agent_class));
      out.setKind(s.kind);
      out.setMethod(to_kj(s.method));
      auto consumed = out.initConsumed(static_cast<unsigned>(s.consumed.size()));
      for (unsigned j = 0; j < s.consumed.size(); ++j) consumed.set(j, to_kj(s.consumed[j]));
      out.setEnqueuedUnixNs(s.enqueued_unix_ns);
      out.setQueueWaitNs(s.queue_wait_ns);
      out.setRunNs(s.run_ns);
      out.setModelCalls(s.model_calls);
      out.setPromptTokens(s.prompt_tokens);
      out.setCompletionTokens(s.completion_tokens);
      out.setOutcome(to_kj(s.outcome));
      out.setErrorMessage(to_kj(s.error_message));
      out.setSeq(s.seq);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> stop(StopContext) override {
    if (ctx_.request_stop) ctx_.request_stop();
    return kj::READY_NOW;
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
