// The client library: a KJ event-loop thread per Client owns the connection (or, in local mode,
// the in-process server); user threads reach it through the Bridge and block on plain
// condition variables.
#include <agentd/client.h>

#include "pooled_connector.h"
#include "bridge.h"
#include "child_process.h"
#include "counting_stream.h"
#include "server.h"
#include "value_codec.h"

#include <capnp/rpc-twoparty.h>
#include <fmt/format.h>
#include <kj/async-io.h>

#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace agentd {

namespace detail {

namespace {

class IgnoreTaskErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&&) override {}  // failures are reported through the call's state
};
IgnoreTaskErrors g_ignore_errors;  // stateless

// One blocking answer from the loop thread to a user thread.
template <typename T>
struct Sync {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<T> value;
  std::optional<Error> error;

  void set(T v) {
    {
      std::lock_guard lock(mu);
      if (value || error) return;
      value.emplace(std::move(v));
    }
    cv.notify_all();
  }
  void fail(Error e) {
    {
      std::lock_guard lock(mu);
      if (value || error) return;
      error.emplace(std::move(e));
    }
    cv.notify_all();
  }
  T wait(std::chrono::milliseconds timeout, const std::string& what) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, timeout, [this] { return value || error; }))
      throw Error(ErrorCode::timeout,
                  fmt::format("{}: no answer within {} ms", what, timeout.count()), "", "", true);
    if (error) throw *error;
    return std::move(*value);
  }
};

AgentInfo read_agent_info(wire::AgentInfo::Reader r) {
  return AgentInfo{to_std(r.getId()),     to_std(r.getName()),       to_std(r.getClassName()),
                   r.getQueuedCalls(),    r.getCompletedCalls(),     r.getFailedCalls()};
}


}  // namespace

// Where a placeholder's result lands. User threads wait on the Sync; the loop-only fields track
// the eager request and whether the whole message must still be asked for.
struct ResultSlot : Sync<Msg> {
  bool wanted = false;          // loop thread: get() was called
  bool too_large = false;       // loop thread: the eager answer said "too large to inline"
  bool full_requested = false;  // loop thread
};


// A call sent on the session whose CallDone has not arrived. Loop thread only.
struct Ticket {
  std::shared_ptr<ResultSlot> slot;  // reply / methodAsync: where the result lands
  std::string call_id;
  std::function<void(wire::CallDone::Reader)> on_done;  // other kinds
  std::function<void(const Error&)> on_fail;

  // The call will never be answered (its connection or submit failed).
  void fail(const Error& e) {
    if (slot)
      slot->fail(e);
    else if (on_fail)
      on_fail(e);
  }
};

// A placeholder passed as input, as the loop thread needs it (no reference to its owner).
struct InputRef {
  std::string call_id;
  std::string origin;
  std::string server_id;
};

// One call waiting for the next Session.submit.
struct OutSpec {
  std::uint64_t ticket = 0;
  wire::CallKind kind = wire::CallKind::REPLY;
  std::string agent_id;
  std::string call_id;
  std::string method;
  std::string class_name;
  std::string name;
  std::optional<Value> args;
  std::optional<Msg> msg;
  std::optional<InputRef> ref;
  std::uint64_t inline_limit = 0;
};

// Everything the loop thread owns. Created and destroyed on the loop thread.
struct LoopState {
  kj::AsyncIoContext& io;
  Bridge bridge;
  kj::TaskSet tasks{g_ignore_errors};
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  kj::Own<Server> local;
  wire::AgentServer::Client server = nullptr;
  wire::Session::Client session = nullptr;
  std::string where;  // the server, for error messages
  // Calls are gathered here and sent together once per loop turn (or when the batch is big).
  std::vector<OutSpec> batch;
  std::size_t batch_bytes = 0;
  bool flush_scheduled = false;
  std::uint64_t next_ticket = 0;
  std::unordered_map<std::uint64_t, Ticket> tickets;
  std::uint64_t bytes_in = 0;   // counted by the CountingStream around the connection
  std::uint64_t bytes_out = 0;

  explicit LoopState(kj::AsyncIoContext& io_in) : io(io_in), bridge(io_in.unixEventPort) {}
};

void flush(LoopState& loop);
void dispatch_done(LoopState& loop, wire::CallDone::Reader done);

// Fails every call still waiting for its CallDone (the connection is gone).
void fail_all_tickets(LoopState& loop, const Error& e) {
  auto tickets = std::move(loop.tickets);
  loop.tickets.clear();
  for (auto& [_, t] : tickets) t.fail(e);
}

// The client end of the session: the server reports finished calls here.
class SinkImpl final : public wire::CallSink::Server {
 public:
  explicit SinkImpl(LoopState& loop) : loop_(loop) {}
  kj::Promise<void> done(DoneContext context) override {
    for (auto d : context.getParams().getCalls()) dispatch_done(loop_, d);
    return kj::READY_NOW;
  }

 private:
  LoopState& loop_;  // outlives the RPC system that calls this
};

// About how many bytes spec takes in a Session.submit.
std::size_t spec_size(const OutSpec& s) {
  return 128 + s.agent_id.size() + s.call_id.size() + s.method.size() + s.class_name.size() +
         s.name.size() + (s.args ? approx_wire_size(*s.args) : 0) +
         (s.msg ? approx_wire_size(*s.msg) : 0) +
         (s.ref ? s.ref->call_id.size() + s.ref->origin.size() + s.ref->server_id.size() : 0);
}

// Loop thread: queues spec for the next submit.
void send_spec(LoopState& loop, OutSpec spec, Ticket ticket) {
  spec.ticket = ++loop.next_ticket;
  const std::size_t size = spec_size(spec);
  // Bounded batches: a call that would take the batch past kBatchBytes starts the next one, so
  // a big call travels alone and one message never nears Cap'n Proto's limit.
  if (!loop.batch.empty() && loop.batch_bytes + size > kBatchBytes) flush(loop);
  loop.tickets.emplace(spec.ticket, std::move(ticket));
  loop.batch_bytes += size;
  loop.batch.push_back(std::move(spec));
  if (loop.batch.size() >= 4096 || loop.batch_bytes >= kBatchBytes) {
    flush(loop);
    return;
  }
  if (loop.flush_scheduled) return;
  loop.flush_scheduled = true;
  loop.tasks.add(kj::evalLater([&loop]() {
    loop.flush_scheduled = false;
    flush(loop);
  }));
}

void write_input_ref(const InputRef& in, wire::Input::Builder out) {
  auto ref = out.initPlaceholder();
  ref.setOrigin(to_kj(in.origin));
  ref.setServerId(to_kj(in.server_id));
  ref.setCallId(to_kj(in.call_id));
}

// Loop thread: sends the gathered calls as one Session.submit. Also called before any other
// request, so nothing overtakes calls issued earlier.
void flush(LoopState& loop) {
  if (loop.batch.empty()) return;
  auto req = loop.session.submitRequest();
  auto list = req.initCalls(static_cast<unsigned>(loop.batch.size()));
  std::vector<std::uint64_t> sent;
  sent.reserve(loop.batch.size());
  for (unsigned i = 0; i < loop.batch.size(); ++i) {
    OutSpec& spec = loop.batch[i];
    auto out = list[i];
    out.setTicket(spec.ticket);
    out.setKind(spec.kind);
    out.setAgentId(to_kj(spec.agent_id));
    if (!spec.call_id.empty()) out.setCallId(to_kj(spec.call_id));
    if (!spec.method.empty()) out.setMethod(to_kj(spec.method));
    if (!spec.class_name.empty()) out.setClassName(to_kj(spec.class_name));
    if (!spec.name.empty()) out.setName(to_kj(spec.name));
    if (spec.args) write_value(*spec.args, out.initArgs());
    if (spec.ref)
      write_input_ref(*spec.ref, out.initInput());
    else if (spec.msg)
      write_msg(*spec.msg, out.initInput().initMsg());
    out.setInlineLimit(spec.inline_limit);
    // A placeholder dropped before its call left (passed on in a chain, never read here): the
    // ticket's slot is its only holder, and nobody can take another reference to it. Its result
    // need not come back.
    if (auto it = loop.tickets.find(spec.ticket);
        it != loop.tickets.end() && it->second.slot && it->second.slot.use_count() == 1) {
      out.setReport(false);
      loop.tickets.erase(it);
      continue;
    }
    sent.push_back(spec.ticket);
  }
  const bool may_be_over = loop.batch_bytes > kMaxMessageBytes / 4;  // only a lone big call
  loop.batch.clear();
  loop.batch_bytes = 0;
  if (may_be_over) {
    const std::size_t exact = req.totalSize().wordCount * sizeof(capnp::word);
    if (exact + 4096 > kMaxMessageBytes) {
      // Cap'n Proto would refuse to send it: fail the call here, saying why.
      Error err(ErrorCode::too_large,
                fmt::format("the call is {} bytes, more than one message can carry ({} bytes); "
                            "send less per call (e.g. split the content over several calls)",
                            exact, kMaxMessageBytes));
      for (auto t : sent) {
        auto it = loop.tickets.find(t);
        if (it == loop.tickets.end()) continue;
        Ticket ticket = std::move(it->second);
        loop.tickets.erase(it);
        ticket.fail(err);
      }
      return;
    }
  }
  auto* loop_ptr = &loop;
  loop.tasks.add(req.send().then(
      [](capnp::Response<wire::Session::SubmitResults>) {},
      [loop_ptr, sent = std::move(sent)](kj::Exception&& e) {
        Error err = error_from_exception(e, "sending calls to " + loop_ptr->where);
        for (auto t : sent) {
          auto it = loop_ptr->tickets.find(t);
          if (it == loop_ptr->tickets.end()) continue;
          Ticket ticket = std::move(it->second);
          loop_ptr->tickets.erase(it);
          ticket.fail(err);
        }
      }));
}

class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  enum class Mode { independent, child, local };

  struct Target {
    Mode mode = Mode::independent;
    std::string host;
    std::uint16_t port = 0;
    LocalOptions local;
  };

  ClientCore(Target target, ClientOptions options, std::unique_ptr<ChildProcess> child = nullptr)
      : options_(options), child_(std::move(child)) {
    std::promise<void> started;
    auto ready = started.get_future();
    thread_ = std::thread([this, target = std::move(target), started = std::move(started)]() mutable {
      thread_main(std::move(target), std::move(started));
    });
    try {
      ready.get();
    } catch (...) {
      thread_.join();
      throw;
    }
  }

  ~ClientCore() {
    post([this]() {
      if (quit_ && quit_->isWaiting()) quit_->fulfill();
    });
    if (thread_.joinable()) thread_.join();
    if (child_) child_->stop(std::chrono::seconds(15));
  }

  // Any thread: run fn on the loop thread.
  void post(kj::Function<void()> fn) {
    Bridge* b = bridge_.load();
    if (b != nullptr) b->post(kj::mv(fn));
  }

  // Any thread but the loop's: run body on the loop thread and wait for what it sets.
  // body gets the loop state and the Sync to fill; a rejected promise becomes an Error.
  template <typename T>
  T sync(std::string what, kj::Function<kj::Promise<void>(LoopState&, Sync<T>&)> body) {
    auto st = std::make_shared<Sync<T>>();
    // Captures only the Sync (never the core): see PlaceholderState.
    post([self = this, st, what, body = kj::mv(body)]() mutable {
      LoopState* loop = self->loop_;
      flush(*loop);  // calls issued before this request go first
      kj::Promise<void> p = nullptr;
      try {
        p = body(*loop, *st);
      } catch (const Error& e) {
        st->fail(e);
        return;
      } catch (const kj::Exception& e) {
        st->fail(error_from_exception(e, what));
        return;
      }
      // The task holds st, so continuations may keep a reference to it.
      loop->tasks.add(p.catch_([st, what](kj::Exception&& e) {
        st->fail(error_from_exception(e, what));
      }));
    });
    if (bridge_.load() == nullptr)
      throw Error(ErrorCode::disconnected, what + ": the client is closed", "", "", true);
    requests_.fetch_add(1, std::memory_order_relaxed);
    waits_.fetch_add(1, std::memory_order_relaxed);
    return st->wait(options_.timeout, what);
  }

  // Any thread but the loop's: send spec on the session and wait for its CallDone, which
  // decode turns into the answer (or throws Error).
  template <typename T>
  T call_sync(std::string what, OutSpec spec,
              std::function<T(wire::CallDone::Reader)> decode) {
    auto st = std::make_shared<Sync<T>>();
    post([self = this, st, spec = std::move(spec), decode = std::move(decode)]() mutable {
      Ticket t;
      t.on_done = [st, decode = std::move(decode)](wire::CallDone::Reader d) {
        try {
          st->set(decode(d));
        } catch (const Error& e) {
          st->fail(e);
        }
      };
      t.on_fail = [st](const Error& e) { st->fail(e); };
      send_spec(*self->loop_, std::move(spec), std::move(t));
    });
    if (bridge_.load() == nullptr)
      throw Error(ErrorCode::disconnected, what + ": the client is closed", "", "", true);
    requests_.fetch_add(1, std::memory_order_relaxed);
    waits_.fetch_add(1, std::memory_order_relaxed);
    return st->wait(options_.timeout, what);
  }

  // False once the client is closed (posts are then dropped).
  bool open() const { return bridge_.load() != nullptr; }
  const ClientOptions& options() const { return options_; }
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> waits_{0};
  const std::string& address() const { return address_; }
  const std::string& server_id() const { return server_id_; }
  std::uint16_t port() const { return port_; }

 private:
  void thread_main(Target target, std::promise<void> started) {
    bool announced = false;
    try {
      auto io = kj::setupAsyncIo();
      LoopState loop(io);
      auto quit = kj::newPromiseAndFulfiller<void>();
      quit_ = kj::mv(quit.fulfiller);
      loop.tasks.add(loop.bridge.run());
      if (target.mode == Mode::local) {
        ServerOptions so;
        so.plugins = target.local.plugins;
        so.plugin_dirs = target.local.plugin_dirs;
        so.model_config_path = target.local.model_config_path;
        so.max_workers = target.local.max_workers;
        so.server_id = "local-" + new_id().substr(0, 8);
        loop.local = kj::heap<Server>(so, io, target.local.classes, pooled_agent_connector());
        loop.server = loop.local->bootstrap();
        server_id_ = loop.local->id();
        address_ = "local";
        loop.tasks.add(loop.local->run());
      } else {
        auto& timer = io.provider->getTimer();
        auto connect_ms = options_.connect_timeout.count() * kj::MILLISECONDS;
        std::string where = fmt::format("{}:{}", target.host, target.port);
        try {
          auto addr = timer.timeoutAfter(connect_ms, io.provider->getNetwork().parseAddress(
                                                         to_kj(target.host), target.port))
                          .wait(io.waitScope);
          loop.stream = kj::heap<CountingStream>(
              timer.timeoutAfter(connect_ms, addr->connect()).wait(io.waitScope), loop.bytes_in,
              loop.bytes_out);
        } catch (const kj::Exception& e) {
          throw Error(ErrorCode::disconnected,
                      fmt::format("cannot connect to as_server at {}: {}; is it running there?",
                                  where, e.getDescription().cStr()),
                      "", "", true);
        }
        loop.rpc = kj::heap<capnp::TwoPartyClient>(*loop.stream);
        loop.server = loop.rpc->bootstrap().castAs<wire::AgentServer>();
        try {
          auto info = timer.timeoutAfter(connect_ms, loop.server.infoRequest().send())
                          .wait(io.waitScope);
          server_id_ = to_std(info.getInfo().getServerId());
          address_ = to_std(info.getInfo().getAdvertiseAddress());
          if (address_.empty()) address_ = where;
        } catch (const kj::Exception& e) {
          throw Error(ErrorCode::disconnected,
                      fmt::format("{} accepted the connection but did not answer as an as_server: {}",
                                  where, e.getDescription().cStr()),
                      "", "", true);
        }
        port_ = target.port;
      }
      loop.where = address_;
      {
        auto req = loop.server.sessionRequest();
        req.setSink(kj::heap<SinkImpl>(loop));
        loop.session = req.send().getSession();  // pipelined: usable at once
      }
      if (loop.rpc) {
        loop.tasks.add(loop.rpc->onDisconnect().then([&loop]() {
          fail_all_tickets(loop, Error(ErrorCode::disconnected,
                                       "lost the connection to as_server at " + loop.where +
                                           " before the call finished",
                                       "", "", true));
        }));
      }
      loop_ = &loop;
      bridge_.store(&loop.bridge);
      announced = true;
      started.set_value();
      quit.promise.wait(io.waitScope);
      // Release every capability while the loop still runs, and let the releases reach the
      // server (a ping answered after them proves it): dropping thousands of queued releases
      // with the connection would unwind one deeply nested promise chain.
      flush(loop);
      if (loop.rpc) {
        try {
          io.provider->getTimer()
              .timeoutAfter(2 * kj::SECONDS, loop.server.pingRequest().send())
              .wait(io.waitScope);
        } catch (const kj::Exception&) {
          // The server is gone or slow: nothing is left to flush.
        }
      }
      // Shut down on this thread: refuse posts, drop capabilities, then the connection.
      bridge_.store(nullptr);
      loop.bridge.close();
      fail_all_tickets(loop, Error(ErrorCode::disconnected, "the client was closed", "", "", true));
      loop.session = nullptr;
      loop_ = nullptr;
    } catch (...) {
      bridge_.store(nullptr);
      loop_ = nullptr;
      if (!announced) started.set_exception(std::current_exception());
    }
  }

  ClientOptions options_;
  std::unique_ptr<ChildProcess> child_;
  std::thread thread_;
  std::atomic<Bridge*> bridge_{nullptr};
  LoopState* loop_ = nullptr;  // loop thread only
  kj::Own<kj::PromiseFulfiller<void>> quit_;
  std::string address_;
  std::string server_id_;
  std::uint16_t port_ = 0;

  friend class agentd::AgentRef;
  friend struct PlaceholderState;
  friend LoopState& loop_of(ClientCore& c);
};

LoopState& loop_of(ClientCore& c) { return *c.loop_; }

// Results up to this size come back with the call's CallDone; bigger ones only when get() asks.
constexpr std::uint64_t kInlineLimit = 64 * 1024;

void request_result(LoopState& loop, const std::string& id, const std::shared_ptr<ResultSlot>& slot);

// Loop thread: the outcome of call id arrived. A "too large" answer is followed up with a read
// of the whole message once get() wants it.
void deliver(LoopState& loop, wire::Outcome::Reader o, const std::string& id,
             const std::shared_ptr<ResultSlot>& slot) {
  switch (o.which()) {
    case wire::Outcome::MSG:
      slot->set(read_msg(o.getMsg()));
      return;
    case wire::Outcome::ERROR:
      slot->fail(read_error(o.getError()));
      return;
    case wire::Outcome::TOO_LARGE:
      break;
  }
  slot->too_large = true;
  if (slot->wanted && !slot->full_requested) {
    slot->full_requested = true;
    request_result(loop, id, slot);
  }
}

// Loop thread: reads the whole result of call id into slot.
void request_result(LoopState& loop, const std::string& id, const std::shared_ptr<ResultSlot>& slot) {
  flush(loop);
  auto req = loop.session.readRequest();
  req.setCallId(to_kj(id));
  auto* loop_ptr = &loop;
  loop.tasks.add(req.send().then(
      [slot, loop_ptr, id](capnp::Response<wire::Session::ReadResults> r) {
        auto o = r.getOutcome();
        // This session was told the call finished (tooLarge), so a server that no longer knows
        // the id evicted it longer ago than it remembers evictions.
        if (o.isError() && o.getError().getCode() == wire::ErrorCode::UNKNOWN_CALL) {
          slot->fail(Error(ErrorCode::expired,
                           fmt::format("result of call {} expired: it was evicted from the "
                                       "server's result pool before get() read it; read large "
                                       "results sooner or raise --max-pool-size / --max-expire-time",
                                       id)));
          return;
        }
        deliver(*loop_ptr, o, id, slot);
      },
      [slot, id](kj::Exception&& e) {
        slot->fail(error_from_exception(e, fmt::format("waiting for the result of call {}", id)));
      }));
}

// Loop thread: deletes agent id, not waiting for (or reporting) the answer.
void delete_quietly(LoopState& loop, const std::string& id) {
  flush(loop);
  auto req = loop.server.deleteAgentRequest();
  req.setId(to_kj(id));
  loop.tasks.add(req.send().ignoreResult());
}

void dispatch_done(LoopState& loop, wire::CallDone::Reader done) {
  auto it = loop.tickets.find(done.getTicket());
  if (it == loop.tickets.end()) return;  // failed already (e.g. its submit was refused)
  Ticket t = std::move(it->second);
  loop.tickets.erase(it);
  if (t.slot) {
    if (done.isOutcome())
      deliver(loop, done.getOutcome(), t.call_id, t.slot);
    else if (done.isError())
      t.slot->fail(read_error(done.getError()));
    else
      t.slot->fail(Error(ErrorCode::internal, "the server answered a call with something odd"));
    return;
  }
  if (t.on_done) t.on_done(done);
}

// The user side of a placeholder. Loop-thread code never holds one (nor the core): it holds
// only the ResultSlot, so the last reference to a ClientCore is always dropped on a user thread.
struct PlaceholderState {
  std::shared_ptr<ClientCore> core;
  std::string call_id;
  std::string agent_id;
  std::shared_ptr<ResultSlot> slot = std::make_shared<ResultSlot>();
  std::atomic<bool> requested{false};

  // get() wants the result: if the eager answer said it is too large, ask for all of it.
  void fetch() {
    if (requested.exchange(true)) return;
    {
      // Already there (the common case): no need to involve the loop thread.
      std::lock_guard lock(slot->mu);
      if (slot->value || slot->error) return;
    }
    core->post([c = core.get(), id = call_id, slot = slot]() {
      slot->wanted = true;
      if (!slot->too_large || slot->full_requested) return;
      slot->full_requested = true;
      request_result(loop_of(*c), id, slot);
    });
  }
};

}  // namespace detail

using detail::ClientCore;
using detail::LoopState;
using detail::Sync;

// ---- Placeholder ----

Msg Placeholder::get() const { return get(s_->core->options().timeout); }


Msg Placeholder::get(std::chrono::milliseconds timeout) const {
  if (!s_->requested.load()) {
    s_->core->requests_.fetch_add(1, std::memory_order_relaxed);
    s_->core->waits_.fetch_add(1, std::memory_order_relaxed);
  }
  s_->fetch();
  auto& slot = *s_->slot;
  std::unique_lock lock(slot.mu);
  if (!slot.cv.wait_for(lock, timeout, [&slot] { return slot.value || slot.error; }))
    throw Error(ErrorCode::timeout,
                fmt::format("the result of call {} to agent {} was not ready within {} ms",
                            s_->call_id, s_->agent_id, timeout.count()),
                s_->agent_id, "", true);
  if (slot.error) throw *slot.error;
  return *slot.value;
}

const std::string& Placeholder::call_id() const { return s_->call_id; }
const std::string& Placeholder::origin() const { return s_->core->address(); }

// ---- AgentRef ----

Placeholder AgentRef::reply(const Msg& x) const { return send_reply(nullptr, &x); }
Placeholder AgentRef::reply(const Placeholder& x) const { return send_reply(&x, nullptr); }
Placeholder AgentRef::reply() const { return send_reply(nullptr, nullptr); }


namespace {

std::shared_ptr<detail::PlaceholderState> new_placeholder(const std::shared_ptr<ClientCore>& core,
                                                          const std::string& agent_id) {
  auto state = std::make_shared<detail::PlaceholderState>();
  state->core = core;
  state->call_id = new_id();
  state->agent_id = agent_id;
  return state;
}

detail::InputRef input_ref(const detail::PlaceholderState& p) {
  return detail::InputRef{p.call_id, p.core->address(), p.core->server_id()};
}

// Queues an asynchronous call (reply / methodAsync) whose result lands in state's slot.
void send_async(ClientCore& core, detail::OutSpec spec, const detail::PlaceholderState& state) {
  core.requests_.fetch_add(1, std::memory_order_relaxed);
  spec.call_id = state.call_id;
  spec.inline_limit = detail::kInlineLimit;
  core.post([c = &core, spec = std::move(spec), slot = state.slot]() mutable {
    detail::Ticket t;
    t.slot = slot;
    t.call_id = spec.call_id;
    detail::send_spec(detail::loop_of(*c), std::move(spec), std::move(t));
  });
}

detail::OutSpec spec_for(wire::CallKind kind, const std::string& agent_id) {
  detail::OutSpec spec;
  spec.kind = kind;
  spec.agent_id = agent_id;
  return spec;
}

// The CallDone of an observe / create / memory: its error, if it carries one.
void throw_if_error(wire::CallDone::Reader d) {
  if (d.isError()) throw detail::read_error(d.getError());
}

}  // namespace

Placeholder AgentRef::send_reply(const Placeholder* input, const Msg* msg) const {
  auto state = new_placeholder(core_, id_);
  auto spec = spec_for(wire::CallKind::REPLY, id_);
  if (input) spec.ref = input_ref(*input->s_);
  else if (msg) spec.msg = *msg;
  send_async(*core_, std::move(spec), *state);
  return Placeholder(std::move(state));
}

void AgentRef::observe(const Msg& x) const {
  auto spec = spec_for(wire::CallKind::OBSERVE, id_);
  spec.msg = x;
  core_->call_sync<bool>("observe " + id_, std::move(spec), [](wire::CallDone::Reader d) {
    throw_if_error(d);
    return true;
  });
}

void AgentRef::observe(const Placeholder& x) const {
  auto spec = spec_for(wire::CallKind::OBSERVE, id_);
  spec.ref = input_ref(*x.s_);
  core_->call_sync<bool>("observe " + id_, std::move(spec), [](wire::CallDone::Reader d) {
    throw_if_error(d);
    return true;
  });
}

Value AgentRef::call(const std::string& method, const Value& args) const {
  auto spec = spec_for(wire::CallKind::METHOD, id_);
  spec.method = method;
  spec.args = args;
  return core_->call_sync<Value>(
      fmt::format("call {}.{}", id_, method), std::move(spec), [](wire::CallDone::Reader d) {
        throw_if_error(d);
        if (!d.isValue()) throw Error(ErrorCode::internal, "the server answered a method call oddly");
        auto o = d.getValue();
        if (o.isError()) throw detail::read_error(o.getError());
        return detail::read_value(o.getValue());
      });
}

Placeholder AgentRef::call_async(const std::string& method, const Value& args) const {
  auto state = new_placeholder(core_, id_);
  auto spec = spec_for(wire::CallKind::METHOD_ASYNC, id_);
  spec.method = method;
  spec.args = args;
  send_async(*core_, std::move(spec), *state);
  return Placeholder(std::move(state));
}

std::vector<Msg> AgentRef::memory() const {
  return core_->call_sync<std::vector<Msg>>(
      "memory of " + id_, spec_for(wire::CallKind::MEMORY, id_), [](wire::CallDone::Reader d) {
        throw_if_error(d);
        std::vector<Msg> out;
        if (d.isMemory())
          for (auto m : d.getMemory()) out.push_back(detail::read_msg(m));
        return out;
      });
}

namespace {
// Loop thread: the info of agent id (two pipelined requests: the agent, then its info).
kj::Promise<void> agent_info(LoopState& loop, const std::string& id, Sync<AgentInfo>& st) {
  auto req = loop.server.agentRequest();
  req.setId(detail::to_kj(id));
  return req.send().then([&st](capnp::Response<wire::AgentServer::AgentResults> r) {
    if (r.hasError()) {
      st.fail(detail::read_error(r.getError()));
      return kj::Promise<void>(kj::READY_NOW);
    }
    return r.getAgent().infoRequest().send().then([&st](capnp::Response<wire::Agent::InfoResults> i) {
      if (i.hasError()) st.fail(detail::read_error(i.getError()));
      else st.set(detail::read_agent_info(i.getAgent()));
    });
  });
}
}  // namespace

AgentInfo AgentRef::info() const {
  return core_->sync<AgentInfo>(
      "info of " + id_, [id = id_](LoopState& loop, Sync<AgentInfo>& st) -> kj::Promise<void> {
        return agent_info(loop, id, st);
      });
}

namespace {
constexpr const char* kRefKey = "agentd_agent_ref";

// Where the agent a reference names lives. Throws Error(bad_args) for anything else.
std::pair<std::string, std::uint16_t> ref_endpoint(const Value& ref) {
  if (!AgentRef::is_ref(ref))
    throw Error(ErrorCode::bad_args,
                "not an agent reference (expected the Value of AgentRef::to_value()): " + ref.dump());
  std::string address = ref[kRefKey].value("address", std::string{});
  std::string host;
  std::uint16_t port = 0;
  if (!detail::split_host_port(address, host, port))
    throw Error(ErrorCode::bad_args,
                "the agent reference names no reachable server (\"" + address +
                    "\"); agents in local mode cannot be reached from other processes");
  return {host, port};
}
}  // namespace

Value AgentRef::to_value() const {
  return Value{{kRefKey,
                {{"id", id_},
                 {"name", name_},
                 {"class", class_name_},
                 {"address", core_->address()},
                 {"server_id", core_->server_id()}}}};
}

bool AgentRef::is_ref(const Value& v) {
  return v.is_object() && v.contains(kRefKey) && v[kRefKey].is_object() &&
         v[kRefKey].contains("id") && v[kRefKey]["id"].is_string();
}

AgentRef AgentRef::from_value(const Value& ref, ClientOptions options) {
  auto [host, port] = ref_endpoint(ref);
  auto client = Client::connect(host, port, options);
  return client.agent(ref[kRefKey]["id"].get<std::string>());
}

AgentRef connect_agent(Agent& caller, const Value& ref) {
  if (caller.services() == nullptr) return AgentRef::from_value(ref);
  return caller.services()->connect_agent(ref);
}

namespace detail {

AgentConnector pooled_agent_connector() {
  // One client connection per server address, opened on first use and shared by every agent
  // of the server that holds the connector; closed when the connector goes.
  struct Pool {
    std::mutex mu;
    std::map<std::string, std::unique_ptr<Client>> clients;
  };
  return [pool = std::make_shared<Pool>()](const Value& ref) {
    auto [host, port] = ref_endpoint(ref);
    std::string key = host + ":" + std::to_string(port);
    Client* client = nullptr;
    {
      std::lock_guard lock(pool->mu);
      auto& c = pool->clients[key];
      if (!c) c = std::make_unique<Client>(Client::connect(host, port));
      client = c.get();
    }
    return client->agent(ref[kRefKey]["id"].get<std::string>());
  };
}

}  // namespace detail

// ---- Client ----

Client Client::connect(const std::string& host, std::uint16_t port, ClientOptions options) {
  ClientCore::Target t;
  t.mode = ClientCore::Mode::independent;
  t.host = host;
  t.port = port;
  return Client(std::make_shared<ClientCore>(std::move(t), options));
}

Client Client::spawn_child(ChildOptions options) {
  std::vector<std::string> args;
  for (const auto& p : options.plugins) args.insert(args.end(), {"--plugin", p});
  for (const auto& d : options.plugin_dirs) args.insert(args.end(), {"--plugin-dir", d});
  if (!options.model_config_path.empty())
    args.insert(args.end(), {"--model-config-path", options.model_config_path});
  // A child logs warnings and errors only (on this process's stderr) unless told otherwise.
  bool has_level = false;
  for (const auto& a : options.extra_args) has_level = has_level || a.rfind("--log-level", 0) == 0;
  if (!has_level) args.insert(args.end(), {"--log-level", "warn"});
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  auto binary = detail::ChildProcess::find_server_binary(options.server_path);
  auto child = detail::ChildProcess::start(binary, args, options.start_timeout);
  ClientCore::Target t;
  t.mode = ClientCore::Mode::child;
  t.host = child->host();
  t.port = child->port();
  return Client(std::make_shared<ClientCore>(std::move(t), options.client, std::move(child)));
}

Client Client::local(LocalOptions options) {
  ClientCore::Target t;
  t.mode = ClientCore::Mode::local;
  ClientOptions copts = options.client;
  t.local = std::move(options);
  return Client(std::make_shared<ClientCore>(std::move(t), copts));
}

Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

AgentRef Client::create_agent(const std::string& class_name, const std::string& name,
                              const Value& args, const std::string& id) {
  auto spec = spec_for(wire::CallKind::CREATE, id);
  spec.class_name = class_name;
  spec.name = name;
  spec.args = args;
  std::string made = core_->call_sync<std::string>(
      fmt::format("create {} agent", class_name), std::move(spec), [](wire::CallDone::Reader d) {
        throw_if_error(d);
        if (!d.isCreated()) throw Error(ErrorCode::internal, "the server answered a create oddly");
        return detail::to_std(d.getCreated());
      });
  return AgentRef(core_, made, name.empty() ? made : name, class_name);
}

std::vector<AgentRef> Client::create_agents(const std::string& class_name, std::size_t count,
                                            const Value& args, const std::string& name_prefix) {
  struct Batch {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t pending = 0;
    std::vector<std::string> ids;      // by index; empty where creation failed
    std::optional<Error> first_error;  // by index order
    std::size_t first_error_index = 0;
    bool abandoned = false;  // the caller timed out: stop, and delete what gets made
  };
  auto b = std::make_shared<Batch>();
  b->pending = count;
  b->ids.resize(count);
  if (count == 0) return {};
  auto name_of = [&](std::size_t i) {
    return name_prefix.empty() ? std::string{} : name_prefix + std::to_string(i);
  };
  std::vector<detail::OutSpec> specs(count);
  for (std::size_t i = 0; i < count; ++i) {
    specs[i] = spec_for(wire::CallKind::CREATE, {});
    specs[i].class_name = class_name;
    specs[i].name = name_of(i);
    specs[i].args = args;
  }
  core_->requests_.fetch_add(1, std::memory_order_relaxed);
  core_->waits_.fetch_add(1, std::memory_order_relaxed);
  // At most kWindow creations in flight: each answer sends the next, so neither side holds
  // count pending requests at once (a high-water mark that would stay in the server's RSS).
  constexpr std::size_t kWindow = 2048;
  struct Sender {
    std::vector<detail::OutSpec> specs;
    std::size_t next = 0;
  };
  auto sender = std::make_shared<Sender>();
  sender->specs = std::move(specs);
  core_->post([c = core_.get(), b, sender]() mutable {
    // Records one answer. Returns true when the caller has given up (the agent must go).
    auto finish = [b](std::size_t i, std::optional<std::string> id, std::optional<Error> e) {
      {
        std::lock_guard lock(b->mu);
        if (b->abandoned) return true;
        if (id) b->ids[i] = std::move(*id);
        if (e && (!b->first_error || i < b->first_error_index)) {
          b->first_error = std::move(e);
          b->first_error_index = i;
        }
        if (--b->pending > 0) return false;
      }
      b->cv.notify_all();
      return false;
    };
    // Loop thread: sends the next spec, whose answer sends the one after it.
    auto send_next = std::make_shared<std::function<void()>>();
    *send_next = [c, sender, finish, weak = std::weak_ptr<std::function<void()>>(send_next)]() {
      if (sender->next >= sender->specs.size()) return;
      std::size_t i = sender->next++;
      auto again = weak.lock();
      detail::Ticket t;
      t.on_done = [c, finish, i, again](wire::CallDone::Reader d) {
        bool abandoned = false;
        if (d.isCreated()) {
          std::string id = detail::to_std(d.getCreated());
          abandoned = finish(i, id, std::nullopt);
          if (abandoned) detail::delete_quietly(detail::loop_of(*c), id);
        } else if (d.isError()) {
          abandoned = finish(i, std::nullopt, detail::read_error(d.getError()));
        } else {
          abandoned = finish(i, std::nullopt, Error(ErrorCode::internal, "the server answered a create oddly"));
        }
        if (!abandoned) (*again)();
      };
      t.on_fail = [finish, i, sender](const Error& e) {
        finish(i, std::nullopt, e);
        // The connection is gone: what was never sent fails the same way.
        while (sender->next < sender->specs.size()) finish(sender->next++, std::nullopt, e);
      };
      detail::send_spec(detail::loop_of(*c), std::move(sender->specs[i]), std::move(t));
    };
    for (std::size_t k = 0; k < kWindow; ++k) (*send_next)();
  });
  if (!core_->open())
    throw Error(ErrorCode::disconnected, "create agents: the client is closed", "", "", true);
  {
    std::unique_lock lock(b->mu);
    if (!b->cv.wait_for(lock, core_->options().timeout, [&] { return b->pending == 0; })) {
      // Give up: no more are sent, and every agent made (now or later) is deleted again.
      b->abandoned = true;
      std::vector<std::string> made;
      for (auto& id : b->ids)
        if (!id.empty()) made.push_back(std::move(id));
      lock.unlock();
      core_->post([c = core_.get(), made = std::move(made)]() {
        for (const auto& id : made) detail::delete_quietly(detail::loop_of(*c), id);
      });
      throw Error(ErrorCode::timeout,
                  fmt::format("create {} {} agents: not all were made within {} ms; the ones "
                              "made are being deleted again",
                              count, class_name, core_->options().timeout.count()),
                  "", class_name, true);
    }
  }
  if (b->first_error) {
    std::size_t made = 0;
    for (const auto& id : b->ids) {
      if (id.empty()) continue;
      ++made;
      try {
        delete_agent(id);
      } catch (const Error&) {
        // Best effort: the server may be gone, which the error below says anyway.
      }
    }
    const Error& e = *b->first_error;
    throw Error(e.code(),
                fmt::format("{} (creating {} {} agents; {} were made and deleted again)",
                            e.message(), count, class_name, made),
                e.agent_id(), e.agent_class(), e.retryable());
  }
  std::vector<AgentRef> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::string name = name_of(i);
    out.push_back(AgentRef(core_, b->ids[i], name.empty() ? b->ids[i] : name, class_name));
  }
  return out;
}

AgentRef Client::agent(const std::string& id) {
  auto info = core_->sync<AgentInfo>(
      "look up agent " + id, [id](LoopState& loop, Sync<AgentInfo>& st) -> kj::Promise<void> {
        return agent_info(loop, id, st);
      });
  return AgentRef(core_, info.id, info.name, info.class_name);
}

std::vector<AgentInfo> Client::list_agents() {
  return core_->sync<std::vector<AgentInfo>>(
      "list agents", [](LoopState& loop, Sync<std::vector<AgentInfo>>& st) -> kj::Promise<void> {
        return loop.server.listAgentsRequest().send().then(
            [&st](capnp::Response<wire::AgentServer::ListAgentsResults> r) {
              std::vector<AgentInfo> out;
              for (auto a : r.getAgents()) out.push_back(detail::read_agent_info(a));
              st.set(std::move(out));
            });
      });
}

void Client::delete_agent(const std::string& id) {
  core_->sync<bool>("delete agent " + id, [id](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    auto req = loop.server.deleteAgentRequest();
    req.setId(detail::to_kj(id));
    return req.send().then([&st](capnp::Response<wire::AgentServer::DeleteAgentResults> r) {
      if (r.hasError()) st.fail(detail::read_error(r.getError()));
      else st.set(true);
    });
  });
}

std::size_t Client::delete_all_agents() {
  return core_->sync<std::size_t>(
      "delete all agents", [](LoopState& loop, Sync<std::size_t>& st) -> kj::Promise<void> {
        return loop.server.deleteAllAgentsRequest().send().then(
            [&st](capnp::Response<wire::AgentServer::DeleteAllAgentsResults> r) {
              st.set(r.getCount());
            });
      });
}

ServerInfo Client::info() {
  return core_->sync<ServerInfo>("server info", [](LoopState& loop, Sync<ServerInfo>& st) -> kj::Promise<void> {
    return loop.server.infoRequest().send().then([&st](capnp::Response<wire::AgentServer::InfoResults> r) {
      auto i = r.getInfo();
      ServerInfo s;
      s.server_id = detail::to_std(i.getServerId());
      s.version = detail::to_std(i.getVersion());
      s.pid = i.getPid();
      s.uptime_seconds = i.getUptimeSeconds();
      s.rss_bytes = i.getRssBytes();
      s.cpu_seconds = i.getCpuSeconds();
      s.agent_count = i.getAgentCount();
      s.pool_size = i.getPoolSize();
      s.advertise_address = detail::to_std(i.getAdvertiseAddress());
      for (auto c : i.getClasses()) s.classes.push_back(detail::to_std(c));
      for (auto c : i.getModelConfigs()) s.model_configs.push_back(detail::to_std(c));
      s.workers = i.getWorkers();
      s.calls_completed = i.getCallsCompleted();
      s.calls_failed = i.getCallsFailed();
      s.calls_queued = i.getCallsQueued();
      s.max_pool_size = i.getMaxPoolSize();
      s.max_expire_seconds = i.getMaxExpireSeconds();
      s.bytes_client_in = i.getBytesClientIn();
      s.bytes_client_out = i.getBytesClientOut();
      s.bytes_peer_in = i.getBytesPeerIn();
      s.bytes_peer_out = i.getBytesPeerOut();
      s.model_config_version = i.getModelConfigVersion();
      s.model_calls = i.getModelCalls();
      s.model_errors = i.getModelErrors();
      s.model_prompt_tokens = i.getModelPromptTokens();
      s.model_completion_tokens = i.getModelCompletionTokens();
      st.set(std::move(s));
    });
  });
}

std::vector<TraceSpan> Client::traces(std::uint32_t limit) {
  return core_->sync<std::vector<TraceSpan>>(
      "traces", [limit](LoopState& loop, Sync<std::vector<TraceSpan>>& st) -> kj::Promise<void> {
        auto req = loop.server.tracesRequest();
        req.setLimit(limit);
        return req.send().then([&st](capnp::Response<wire::AgentServer::TracesResults> r) {
          std::vector<TraceSpan> out;
          for (auto s : r.getSpans()) {
            TraceSpan t;
            t.seq = s.getSeq();
            t.call_id = detail::to_std(s.getCallId());
            t.agent_id = detail::to_std(s.getAgentId());
            t.agent_class = detail::to_std(s.getAgentClass());
            t.kind = detail::to_std(s.getKind());
            t.method = detail::to_std(s.getMethod());
            for (auto c : s.getConsumed()) t.consumed.push_back(detail::to_std(c));
            t.enqueued_unix_ns = s.getEnqueuedUnixNs();
            t.queue_wait_ns = s.getQueueWaitNs();
            t.run_ns = s.getRunNs();
            t.model_calls = s.getModelCalls();
            t.prompt_tokens = s.getPromptTokens();
            t.completion_tokens = s.getCompletionTokens();
            t.outcome = detail::to_std(s.getOutcome());
            t.error_message = detail::to_std(s.getErrorMessage());
            out.push_back(std::move(t));
          }
          st.set(std::move(out));
        });
      });
}

void Client::ping() {
  core_->sync<bool>("ping", [](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    return loop.server.pingRequest().send().then(
        [&st](capnp::Response<wire::AgentServer::PingResults>) { st.set(true); });
  });
}

void Client::stop() {
  core_->sync<bool>("stop", [](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    // A server that stops may close the connection before its answer is written: that
    // disconnect is the stop having happened, not a failure.
    return loop.server.stopRequest().send().then(
        [&st](capnp::Response<wire::AgentServer::StopResults>) { st.set(true); },
        [&st](kj::Exception&& e) {
          if (e.getType() == kj::Exception::Type::DISCONNECTED)
            st.set(true);
          else
            st.fail(detail::error_from_exception(e, "stop"));
        });
  });
}

std::uint64_t Client::set_model_configs(const std::string& text) {
  return core_->sync<std::uint64_t>(
      "set model configs", [text](LoopState& loop, Sync<std::uint64_t>& st) -> kj::Promise<void> {
        auto req = loop.server.setModelConfigsRequest();
        req.setYaml(detail::to_kj(text));
        return req.send().then([&st](capnp::Response<wire::AgentServer::SetModelConfigsResults> r) {
          if (r.hasError()) st.fail(detail::read_error(r.getError()));
          else st.set(r.getVersion());
        });
      });
}

ClientStats Client::stats() {
  struct Bytes {
    std::uint64_t in, out;
  };
  // Read on the loop thread (which owns the counters); not a server round trip.
  auto st = std::make_shared<Sync<Bytes>>();
  core_->post([c = core_.get(), st]() {
    auto& loop = detail::loop_of(*c);
    st->set(Bytes{loop.bytes_in, loop.bytes_out});
  });
  Bytes b = st->wait(core_->options().timeout, "client stats");
  ClientStats s;
  s.bytes_sent = b.out;
  s.bytes_received = b.in;
  s.requests = core_->requests_.load();
  s.waits = core_->waits_.load();
  return s;
}

const std::string& Client::address() const { return core_->address(); }
const std::string& Client::server_id() const { return core_->server_id(); }
std::uint16_t Client::port() const { return core_->port(); }

}  // namespace agentd
