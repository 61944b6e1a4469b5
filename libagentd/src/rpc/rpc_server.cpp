#include "rpc_server.h"

#include "agent_host.h"
#include "model_registry.h"
#include "peer_pool.h"
#include "plugin_loader.h"
#include "result_pool.h"
#include "value_codec.h"
#include "worker_pool.h"

#include <agentd/version.h>

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>

namespace agentd::detail {

namespace {

// Completions that could not be sent. A client that went away needs no word; anything else
// means calls the client will never hear of, which must not pass silently.
class LogSendErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& e) override {
    if (e.getType() == kj::Exception::Type::DISCONNECTED) return;
    spdlog::error("could not send call completions to a client: {}", e.getDescription().cStr());
  }
};
LogSendErrors g_log_send_errors;  // stateless

// inline_limit > 0: a bigger message is announced (tooLarge) instead of sent.
void write_outcome(const Outcome& o, wire::Outcome::Builder out, std::uint64_t inline_limit = 0) {
  if (const Msg* m = std::get_if<Msg>(&o)) {
    if (inline_limit > 0) {
      auto size = approx_wire_size(*m);
      if (size > inline_limit) {
        out.setTooLarge(size);
        return;
      }
    }
    write_msg(*m, out.initMsg());
  } else
    write_error(std::get<Error>(o), out.initError());
}

// About how many bytes write_error(e) / write_outcome(o, ..., inline_limit) write.
std::size_t error_size(const Error& e) {
  return e.message().size() + e.agent_id().size() + e.agent_class().size() + 64;
}
std::size_t outcome_size(const Outcome& o, std::uint64_t inline_limit) {
  if (const Msg* m = std::get_if<Msg>(&o)) {
    std::size_t size = approx_wire_size(*m);
    return inline_limit > 0 && size > inline_limit ? 16 : size;
  }
  return error_size(std::get<Error>(o));
}

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

// Answers an RPC with the outcome of call_id once it is there. The pool may run the waiter on a
// worker (with the host lock held); the answer is written on the loop thread.
template <typename Context>
kj::Promise<void> answer_when_ready(RpcContext& ctx, const std::string& call_id, Context context,
                                    bool wait_for_unknown, std::uint64_t inline_limit = 0) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  auto lock = ctx.host.lock();
  ctx.results.when_ready(
      call_id,
      [&host = ctx.host, context, f = kj::mv(paf.fulfiller), inline_limit](const OutcomePtr& o) mutable {
        host.on_loop([context, f = kj::mv(f), o, inline_limit]() mutable {
          if (!f->isWaiting()) return;  // the caller went away
          write_outcome(*o, context.getResults().initOutcome(), inline_limit);
          f->fulfill();
        });
      },
      wait_for_unknown);
  return kj::mv(paf.promise);
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
    return answer_when_ready(ctx_, call_id_, context, /*wait_for_unknown=*/false,
                             context.getParams().getInlineLimit());
  }

 private:
  RpcContext& ctx_;
  std::string call_id_;
};

Error unknown_agent_error(const std::string& id) {
  return Error(ErrorCode::unknown_agent, fmt::format("no agent '{}' on this server", id), id);
}

// Queues call on agent_id with its input: a message at once, a placeholder once it resolves
// (from this server's pool, or fetched from its origin over a peer connection).
void enqueue_with_input(RpcContext& ctx, const std::string& agent_id, std::shared_ptr<Call> call,
                        wire::Input::Reader input) {
  switch (input.which()) {
    case wire::Input::NONE:
      ctx.host.enqueue(agent_id, kj::mv(call));
      return;
    case wire::Input::MSG:
      call->input = std::make_shared<const Outcome>(read_msg(input.getMsg()));
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
  auto waiter = ctx.host.input_waiter(agent_id, call);
  std::string server_id = to_std(ref.getServerId());
  if (server_id == ctx.server_id) {
    // Produced here: the pool hands the result over directly when the producer finishes.
    auto lock = ctx.host.lock();
    ctx.results.when_ready(producer_call, kj::mv(waiter), /*wait_for_unknown=*/true);
  } else {
    // Produced elsewhere: fetch it from the origin server over a peer connection.
    ctx.peers.fetch(to_std(ref.getOrigin()), server_id, producer_call, kj::mv(waiter));
  }
}

// reply / callAsync: announces call_id in the pool and queues the call. Returns the error when
// the id is taken (the call is then not queued).
std::optional<Error> start_async(RpcContext& ctx, const std::string& agent_id,
                                 std::shared_ptr<Call> call, const std::string& call_id,
                                 kj::Maybe<wire::Input::Reader> input) {
  auto lock = ctx.host.lock();
  if (!ctx.results.add_pending(call_id, agent_id)) {
    return Error(ErrorCode::duplicate_call_id,
                 fmt::format("call id {} was already used on this server; call ids must be unique",
                             call_id),
                 agent_id, ctx.host.class_of(agent_id));
  }
  call->call_id = call_id;
  KJ_IF_MAYBE(in, input) {
    enqueue_with_input(ctx, agent_id, kj::mv(call), *in);
  } else {
    ctx.host.enqueue(agent_id, kj::mv(call));
  }
  return std::nullopt;
}

class AgentImpl final : public wire::Agent::Server {
 public:
  AgentImpl(RpcContext& ctx, std::string id) : ctx_(ctx), id_(std::move(id)) {}

  kj::Promise<void> reply(ReplyContext context) override {
    auto params = context.getParams();
    auto call = std::make_shared<Call>();
    call->kind = Call::Kind::reply;
    return start(context, kj::mv(call), to_std(params.getCallId()), params.getInput(),
                 params.getInlineLimit());
  }

  kj::Promise<void> callAsync(CallAsyncContext context) override {
    auto params = context.getParams();
    auto call = std::make_shared<Call>();
    call->kind = Call::Kind::method_async;
    call->method = to_std(params.getMethod());
    call->args = read_value(params.getArgs());
    return start(context, kj::mv(call), to_std(params.getCallId()), nullptr,
                 params.getInlineLimit());
  }

  kj::Promise<void> observe(ObserveContext context) override {
    if (!ctx_.host.exists(id_)) {
      write_error(unknown_agent_error(id_), context.getResults().initError());
      return kj::READY_NOW;
    }
    auto call = std::make_shared<Call>();
    call->kind = Call::Kind::observe;
    enqueue_with_input(ctx_, id_, call, context.getParams().getInput());
    return kj::READY_NOW;
  }

  kj::Promise<void> call(CallContext context) override {
    auto params = context.getParams();
    auto call = std::make_shared<Call>();
    call->kind = Call::Kind::method;
    call->method = to_std(params.getMethod());
    call->args = read_value(params.getArgs());
    auto paf = kj::newPromiseAndFulfiller<void>();
    call->on_done = [context, f = kj::mv(paf.fulfiller)](Call& c) mutable {
      if (!f->isWaiting()) return;
      auto out = context.getResults().initOutcome();
      if (c.out_error)
        write_error(*c.out_error, out.initError());
      else
        write_value(c.out_value, out.initValue());
      f->fulfill();
    };
    call->has_on_done = true;
    ctx_.host.enqueue(id_, kj::mv(call));
    return kj::mv(paf.promise);
  }

  kj::Promise<void> memory(MemoryContext context) override {
    auto call = std::make_shared<Call>();
    call->kind = Call::Kind::memory;
    auto paf = kj::newPromiseAndFulfiller<void>();
    call->on_done = [context, f = kj::mv(paf.fulfiller)](Call& c) mutable {
      if (!f->isWaiting()) return;
      auto results = context.getResults();
      if (c.out_error) {
        write_error(*c.out_error, results.initError());
      } else {
        auto list = results.initMsgs(static_cast<unsigned>(c.out_memory.size()));
        for (unsigned i = 0; i < c.out_memory.size(); ++i) write_msg(c.out_memory[i], list[i]);
      }
      f->fulfill();
    };
    call->has_on_done = true;
    ctx_.host.enqueue(id_, kj::mv(call));
    return kj::mv(paf.promise);
  }

  kj::Promise<void> info(InfoContext context) override {
    if (auto row = ctx_.host.info(id_))
      write_row(*row, context.getResults().initAgent());
    else
      write_error(unknown_agent_error(id_), context.getResults().initError());
    return kj::READY_NOW;
  }

 private:
  // reply / callAsync: queue the call and hand back its Result (one that only reports the error
  // when the call id was taken); answer at once (inline_limit 0) or once the call is done.
  template <typename Context>
  kj::Promise<void> start(Context& context, std::shared_ptr<Call> call, std::string call_id,
                          kj::Maybe<wire::Input::Reader> input, std::uint64_t inline_limit) {
    if (call_id.empty()) call_id = new_id();
    auto refused = start_async(ctx_, id_, kj::mv(call), call_id, input);
    if (refused) {
      context.getResults().setResult(kj::heap<FailedResult>(std::move(*refused)));
      return kj::READY_NOW;
    }
    context.getResults().setResult(kj::heap<ResultImpl>(ctx_, call_id));
    if (inline_limit == 0) return kj::READY_NOW;
    return answer_when_ready(ctx_, call_id, context, /*wait_for_unknown=*/false, inline_limit);
  }

  RpcContext& ctx_;
  std::string id_;
};

// The batched call path of one client connection. Calls arrive many per submit; their
// completions are collected on the loop thread and sent to the client's sink together, one
// CallSink.done per loop turn, so a burst of calls costs a few messages each way.
class SessionImpl final : public wire::Session::Server {
 public:
  SessionImpl(RpcContext& ctx, wire::CallSink::Client sink)
      : ctx_(ctx), out_(std::make_shared<Outbox>(kj::mv(sink))) {}

  kj::Promise<void> submit(SubmitContext context) override {
    auto calls = context.getParams().getCalls();
    auto lock = ctx_.host.lock();  // once for the whole batch (the lock is recursive)
    for (auto spec : calls) {
      try {
        queue(spec);
      } catch (const Error& e) {
        out_->add_error(spec.getTicket(), e);
      }
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> read(ReadContext context) override {
    // A session reads only results it was told about (tooLarge), so an id the pool no longer
    // has was evicted: answer at once (expired, or unknown_call long after), never wait.
    return answer_when_ready(ctx_, to_std(context.getParams().getCallId()), context,
                             /*wait_for_unknown=*/false);
  }

 private:
  // Completions waiting for the next CallSink.done. Loop thread only; completions that arrive
  // after the session is gone (weak_ptr expired) are dropped.
  struct Outbox : std::enable_shared_from_this<Outbox> {
    // One finished call: its ticket, about how many bytes its CallDone takes, and how to write
    // the rest of it.
    struct Item {
      std::uint64_t ticket = 0;
      std::size_t size = 0;
      kj::Function<void(wire::CallDone::Builder)> write;
    };

    explicit Outbox(wire::CallSink::Client s) : sink(kj::mv(s)) {}

    void add(std::uint64_t ticket, std::size_t size,
             kj::Function<void(wire::CallDone::Builder)> write) {
      items.push_back(Item{ticket, size + 16, kj::mv(write)});
      if (scheduled) return;
      scheduled = true;
      // After everything already queued on the loop (a whole bridge batch), send them at once.
      std::weak_ptr<Outbox> weak = shared_from_this();
      tasks.add(kj::evalLater([weak]() {
        if (auto self = weak.lock()) self->flush();
      }));
    }
    void add_error(std::uint64_t ticket, Error e) {
      std::size_t size = error_size(e);
      add(ticket, size, [e = std::move(e)](wire::CallDone::Builder out) {
        write_error(e, out.initError());
      });
    }

    // Sends the gathered completions, as many CallSink.done messages of at most about
    // kBatchBytes as they need: one message over Cap'n Proto's limit would be refused whole.
    void flush() {
      scheduled = false;
      std::size_t begin = 0;
      while (begin < items.size()) {
        std::size_t end = begin + 1;
        std::size_t bytes = items[begin].size;
        while (end < items.size() && bytes + items[end].size <= kBatchBytes) bytes += items[end++].size;
        send(begin, end, bytes);
        begin = end;
      }
      items.clear();
    }

    // Sends items [begin, end) as one CallSink.done. A batch holds more than kBatchBytes only
    // when it is one big item; if that one is over the message limit, its call gets too_large.
    void send(std::size_t begin, std::size_t end, std::size_t approx_bytes) {
      auto req = sink.doneRequest();
      auto list = req.initCalls(static_cast<unsigned>(end - begin));
      for (std::size_t i = begin; i < end; ++i) {
        auto out = list[static_cast<unsigned>(i - begin)];
        out.setTicket(items[i].ticket);
        items[i].write(out);
      }
      if (approx_bytes > kMaxMessageBytes / 4) {
        const std::size_t exact = req.totalSize().wordCount * sizeof(capnp::word);
        if (exact + 4096 > kMaxMessageBytes) {
          req = sink.doneRequest();
          auto d = req.initCalls(1)[0];
          d.setTicket(items[begin].ticket);
          write_error(Error(ErrorCode::too_large,
                            fmt::format("the answer to this call is {} bytes, more than one "
                                        "message can carry ({} bytes); make the agent return less "
                                        "per call",
                                        exact, kMaxMessageBytes)),
                      d.initError());
        }
      }
      tasks.add(req.send().ignoreResult());
    }

    wire::CallSink::Client sink;
    std::vector<Item> items;
    bool scheduled = false;
    kj::TaskSet tasks{g_log_send_errors};
  };

  void queue(wire::CallSpec::Reader spec) {
    const std::uint64_t ticket = spec.getTicket();
    std::string agent_id = to_std(spec.getAgentId());
    std::weak_ptr<Outbox> weak = out_;
    switch (spec.getKind()) {
      case wire::CallKind::REPLY:
      case wire::CallKind::METHOD_ASYNC: {
        auto call = std::make_shared<Call>();
        if (spec.getKind() == wire::CallKind::REPLY) {
          call->kind = Call::Kind::reply;
        } else {
          call->kind = Call::Kind::method_async;
          call->method = to_std(spec.getMethod());
          call->args = read_value(spec.getArgs());
        }
        std::string call_id = to_std(spec.getCallId());
        if (call_id.empty()) throw Error(ErrorCode::bad_request, "a reply without a call id");
        kj::Maybe<wire::Input::Reader> input = nullptr;
        if (call->kind == Call::Kind::reply) input = spec.getInput();
        if (auto refused = start_async(ctx_, agent_id, kj::mv(call), call_id, input)) {
          if (spec.getReport()) out_->add_error(ticket, std::move(*refused));
          return;
        }
        if (!spec.getReport()) return;  // nobody at the client can read it: no CallDone
        const std::uint64_t limit = spec.getInlineLimit();
        ctx_.results.when_ready(
            call_id,
            [&host = ctx_.host, weak, ticket, limit](const OutcomePtr& o) {
              host.on_loop([weak, ticket, limit, o]() {
                if (auto out = weak.lock())
                  out->add(ticket, outcome_size(*o, limit), [o, limit](wire::CallDone::Builder d) {
                    write_outcome(*o, d.initOutcome(), limit);
                  });
              });
            },
            /*wait_for_unknown=*/false);
        return;
      }
      case wire::CallKind::OBSERVE: {
        if (!ctx_.host.exists(agent_id)) throw unknown_agent_error(agent_id);
        auto call = std::make_shared<Call>();
        call->kind = Call::Kind::observe;
        enqueue_with_input(ctx_, agent_id, kj::mv(call), spec.getInput());
        out_->add(ticket, 0, [](wire::CallDone::Builder d) { d.setDone(); });
        return;
      }
      case wire::CallKind::METHOD: {
        auto call = std::make_shared<Call>();
        call->kind = Call::Kind::method;
        call->method = to_std(spec.getMethod());
        call->args = read_value(spec.getArgs());
        call->on_done = [weak, ticket](Call& c) {
          auto out = weak.lock();
          if (!out) return;
          std::size_t size = c.out_error ? error_size(*c.out_error) : approx_wire_size(c.out_value);
          out->add(ticket, size, [value = std::move(c.out_value),
                                  error = std::move(c.out_error)](wire::CallDone::Builder d) {
            auto v = d.initValue();
            if (error)
              write_error(*error, v.initError());
            else
              write_value(value, v.initValue());
          });
        };
        call->has_on_done = true;
        ctx_.host.enqueue(agent_id, kj::mv(call));
        return;
      }
      case wire::CallKind::MEMORY: {
        auto call = std::make_shared<Call>();
        call->kind = Call::Kind::memory;
        call->on_done = [weak, ticket](Call& c) {
          auto out = weak.lock();
          if (!out) return;
          std::size_t size = c.out_error ? error_size(*c.out_error) : 0;
          for (const auto& m : c.out_memory) size += approx_wire_size(m);
          out->add(ticket, size, [msgs = std::move(c.out_memory),
                                  error = std::move(c.out_error)](wire::CallDone::Builder d) {
            if (error) {
              write_error(*error, d.initError());
              return;
            }
            auto list = d.initMemory(static_cast<unsigned>(msgs.size()));
            for (unsigned i = 0; i < msgs.size(); ++i) write_msg(msgs[i], list[i]);
          });
        };
        call->has_on_done = true;
        ctx_.host.enqueue(agent_id, kj::mv(call));
        return;
      }
      case wire::CallKind::CREATE: {
        auto made = ctx_.host.create(
            to_std(spec.getClassName()), to_std(spec.getName()), read_value(spec.getArgs()),
            agent_id, [weak, ticket](std::variant<AgentInfoRow, Error> r) {
              auto out = weak.lock();
              if (!out) return;
              if (auto* err = std::get_if<Error>(&r)) {
                out->add_error(ticket, std::move(*err));
                return;
              }
              out->add(ticket, 64, [id = std::get<AgentInfoRow>(r).id](wire::CallDone::Builder d) {
                d.setCreated(to_kj(id));
              });
            });
        if (auto* err = std::get_if<Error>(&made)) out_->add_error(ticket, std::move(*err));
        return;
      }
    }
    throw Error(ErrorCode::bad_request, "a call of an unknown kind (a newer client?)");
  }

  RpcContext& ctx_;
  std::shared_ptr<Outbox> out_;
};

class AgentServerImpl final : public wire::AgentServer::Server {
 public:
  AgentServerImpl(RpcContext& ctx, std::function<void()> on_fetch)
      : ctx_(ctx), on_fetch_(std::move(on_fetch)) {}

  kj::Promise<void> createAgent(CreateAgentContext context) override {
    auto params = context.getParams();
    auto paf = kj::newPromiseAndFulfiller<void>();
    auto result = ctx_.host.create(
        to_std(params.getClassName()), to_std(params.getName()), read_value(params.getArgs()),
        to_std(params.getAgentId()),
        [this, context, f = std::make_shared<kj::Own<kj::PromiseFulfiller<void>>>(
                            kj::mv(paf.fulfiller))](std::variant<AgentInfoRow, Error> r) mutable {
          if (!(*f)->isWaiting()) return;
          auto results = context.getResults();
          if (auto* row = std::get_if<AgentInfoRow>(&r)) {
            results.setId(to_kj(row->id));
            results.setAgent(kj::heap<AgentImpl>(ctx_, row->id));
          } else {
            write_error(std::get<Error>(r), results.initError());
          }
          (*f)->fulfill();
        });
    if (auto* err = std::get_if<Error>(&result)) {
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
    if (!ctx_.host.remove(id))
      write_error(Error(ErrorCode::unknown_agent, fmt::format("no agent '{}' on this server", id), id),
                  context.getResults().initError());
    return kj::READY_NOW;
  }

  kj::Promise<void> deleteAllAgents(DeleteAllAgentsContext context) override {
    context.getResults().setCount(ctx_.host.remove_all());
    return kj::READY_NOW;
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
    {
      auto lock = ctx_.host.lock();
      out.setPoolSize(ctx_.results.size());
    }
    out.setAdvertiseAddress(to_kj(ctx_.advertise_address));
    auto names = ctx_.catalog.names();
    auto classes = out.initClasses(static_cast<unsigned>(names.size()));
    for (unsigned i = 0; i < names.size(); ++i) classes.set(i, to_kj(names[i]));
    out.setWorkers(static_cast<std::uint32_t>(ctx_.workers.threads()));
    out.setCallsCompleted(ctx_.host.calls_completed());
    out.setCallsFailed(ctx_.host.calls_failed());
    out.setCallsQueued(ctx_.host.queued_calls());
    out.setMaxPoolSize(ctx_.results.limits().max_size);
    out.setMaxExpireSeconds(ctx_.results.limits().max_age.count() / 1000.0);
    auto models = ctx_.models.names();
    auto ml = out.initModelConfigs(static_cast<unsigned>(models.size()));
    for (unsigned i = 0; i < models.size(); ++i) ml.set(i, to_kj(models[i]));
    out.setModelConfigVersion(ctx_.models.version());
    const ModelUsage usage = ctx_.models.total_usage();
    out.setModelCalls(usage.calls);
    out.setModelErrors(usage.errors);
    out.setModelPromptTokens(usage.prompt_tokens);
    out.setModelCompletionTokens(usage.completion_tokens);
    if (ctx_.counters != nullptr) {
      out.setBytesClientIn(ctx_.counters[0]);
      out.setBytesClientOut(ctx_.counters[1]);
      out.setBytesPeerIn(ctx_.counters[2]);
      out.setBytesPeerOut(ctx_.counters[3]);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> fetch(FetchContext context) override {
    if (on_fetch_) {
      on_fetch_();
      on_fetch_ = nullptr;
    }
    return answer_when_ready(ctx_, to_std(context.getParams().getCallId()), context,
                             /*wait_for_unknown=*/true);
  }

  kj::Promise<void> ping(PingContext) override { return kj::READY_NOW; }

  kj::Promise<void> session(SessionContext context) override {
    context.getResults().setSession(
        kj::heap<SessionImpl>(ctx_, context.getParams().getSink()));
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
