// The client library: a KJ event-loop thread per Client owns the connection (or, in local mode,
// the in-process server); user threads reach it through the Bridge and block on plain
// condition variables.
#include <agentd/client.h>

#include "agent_services.h"
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

// Everything the loop thread owns. Created and destroyed on the loop thread.
struct LoopState {
  kj::AsyncIoContext& io;
  Bridge bridge;
  kj::TaskSet tasks{g_ignore_errors};
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  kj::Own<Server> local;
  wire::AgentServer::Client server = nullptr;
  std::unordered_map<std::string, wire::Agent::Client> agents;
  std::unordered_map<std::string, wire::Result::Client> results;  // pipelined, by call id
  std::uint64_t bytes_in = 0;   // counted by the CountingStream around the connection
  std::uint64_t bytes_out = 0;

  explicit LoopState(kj::AsyncIoContext& io_in) : io(io_in), bridge(io_in.unixEventPort) {}
};

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
        loop.local = kj::heap<Server>(so, io, target.local.classes);
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
      loop_ = &loop;
      bridge_.store(&loop.bridge);
      announced = true;
      started.set_value();
      quit.promise.wait(io.waitScope);
      // Release every capability while the loop still runs, and let the releases reach the
      // server (a ping answered after them proves it): dropping thousands of queued releases
      // with the connection would unwind one deeply nested promise chain.
      loop.agents.clear();
      loop.results.clear();
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

// Where a placeholder's result lands. User threads wait on the Sync; the loop-only fields track
// the eager request and whether the whole message must still be asked for.
struct ResultSlot : Sync<Msg> {
  bool wanted = false;          // loop thread: get() was called
  bool too_large = false;       // loop thread: the eager answer said "too large to inline"
  bool full_requested = false;  // loop thread
};

// Results up to this size come back with the eager request; bigger ones only when get() asks.
constexpr std::uint64_t kInlineLimit = 64 * 1024;

void request_result(LoopState& loop, wire::Result::Client& result, const std::string& id,
                    const std::shared_ptr<ResultSlot>& slot, std::uint64_t inline_limit);

// Loop thread: an outcome arrived for call id. A "too large" answer is followed up with a
// request for the whole message once get() wants it.
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
    auto it = loop.results.find(id);
    if (it == loop.results.end()) return;
    slot->full_requested = true;
    request_result(loop, it->second, id, slot, 0);
  }
}

// Loop thread: asks for the result of call id (inline_limit 0: whole message) into slot.
void request_result(LoopState& loop, wire::Result::Client& result, const std::string& id,
                    const std::shared_ptr<ResultSlot>& slot, std::uint64_t inline_limit) {
  auto req = result.getRequest();
  req.setInlineLimit(inline_limit);
  auto* loop_ptr = &loop;
  loop.tasks.add(req.send().then(
      [slot, loop_ptr, id](capnp::Response<wire::Result::GetResults> r) {
        deliver(*loop_ptr, r.getOutcome(), id, slot);
      },
      [slot, id](kj::Exception&& e) {
        slot->fail(error_from_exception(e, fmt::format("waiting for the result of call {}", id)));
      }));
}

// Loop thread: the answer of a reply/callAsync sent with an inline limit lands in slot.
template <typename Response>
void take_outcome(LoopState& loop, capnp::RemotePromise<Response> promise, const std::string& id,
                  const std::shared_ptr<ResultSlot>& slot) {
  auto* loop_ptr = &loop;
  loop.tasks.add(promise.then(
      [slot, loop_ptr, id](capnp::Response<Response> r) {
        if (!r.hasOutcome()) {
          // Refused before it ran (a duplicate call id): the Result says why.
          auto it = loop_ptr->results.find(id);
          if (it != loop_ptr->results.end()) request_result(*loop_ptr, it->second, id, slot, 0);
          return;
        }
        deliver(*loop_ptr, r.getOutcome(), id, slot);
      },
      [slot, id](kj::Exception&& e) {
        slot->fail(error_from_exception(e, fmt::format("waiting for the result of call {}", id)));
      }));
}

// The user side of a placeholder. Loop-thread code never holds one (nor the core): it holds
// only the ResultSlot, so the last reference to a ClientCore is always dropped on a user thread.
struct PlaceholderState {
  std::shared_ptr<ClientCore> core;
  std::string call_id;
  std::string agent_id;
  std::shared_ptr<ResultSlot> slot = std::make_shared<ResultSlot>();
  std::atomic<bool> requested{false};

  ~PlaceholderState() {
    // Forget the pipelined capability (the server keeps the result in its pool).
    core->post([c = core.get(), id = call_id]() { loop_of(*c).results.erase(id); });
  }

  // get() wants the result: if the eager answer said it is too large, ask for all of it.
  void fetch() {
    if (requested.exchange(true)) return;
    core->post([c = core.get(), id = call_id, slot = slot]() {
      slot->wanted = true;
      if (!slot->too_large || slot->full_requested) return;
      auto& loop = loop_of(*c);
      auto it = loop.results.find(id);
      if (it == loop.results.end()) return;
      slot->full_requested = true;
      request_result(loop, it->second, id, slot, 0);
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

// What a loop-thread lambda needs to pass a placeholder on (no reference to its owner).
struct InputRef {
  std::string call_id;
  std::string origin;
  std::string server_id;
};

InputRef input_ref(const detail::PlaceholderState& p) {
  return InputRef{p.call_id, p.core->address(), p.core->server_id()};
}

void write_input_ref(LoopState& loop, const InputRef& in, wire::Input::Builder out) {
  auto ref = out.initPlaceholder();
  ref.setOrigin(detail::to_kj(in.origin));
  ref.setServerId(detail::to_kj(in.server_id));
  ref.setCallId(detail::to_kj(in.call_id));
  // Same connection: the pipelined capability too, so the server can resolve it locally.
  if (auto it = loop.results.find(in.call_id); it != loop.results.end()) ref.setResult(it->second);
}

}  // namespace

Placeholder AgentRef::send_reply(const Placeholder* input, const Msg* msg) const {
  auto state = new_placeholder(core_, id_);
  core_->requests_.fetch_add(1, std::memory_order_relaxed);
  std::optional<InputRef> in_ref = input ? std::optional<InputRef>(input_ref(*input->s_)) : std::nullopt;
  std::optional<Msg> in_msg = msg ? std::optional<Msg>(*msg) : std::nullopt;
  core_->post([c = core_.get(), id = id_, call_id = state->call_id, in_ref = std::move(in_ref),
               in_msg = std::move(in_msg), slot = state->slot]() mutable {
    auto& loop = detail::loop_of(*c);
    auto it = loop.agents.find(id);
    if (it == loop.agents.end()) {
      slot->fail(Error(ErrorCode::unknown_agent, "this client has no handle on agent " + id, id));
      return;
    }
    auto req = it->second.replyRequest();
    req.setCallId(detail::to_kj(call_id));
    if (in_ref)
      write_input_ref(loop, *in_ref, req.initInput());
    else if (in_msg)
      detail::write_msg(*in_msg, req.initInput().initMsg());
    else
      req.initInput().setNone();
    // The answer comes when the call is done, with the result inline when it is small; the
    // Result capability is there at once (pipelined) for passing the placeholder on.
    req.setInlineLimit(detail::kInlineLimit);
    auto promise = req.send();
    loop.results.emplace(call_id, promise.getResult());
    detail::take_outcome(loop, kj::mv(promise), call_id, slot);
  });
  return Placeholder(std::move(state));
}

void AgentRef::observe(const Msg& x) const {
  core_->sync<bool>("observe " + id_, [id = id_, x](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    auto it = loop.agents.find(id);
    if (it == loop.agents.end()) throw Error(ErrorCode::unknown_agent, "no handle on agent " + id, id);
    auto req = it->second.observeRequest();
    detail::write_msg(x, req.initInput().initMsg());
    return req.send().then([&st](capnp::Response<wire::Agent::ObserveResults> r) {
      if (r.hasError()) st.fail(detail::read_error(r.getError()));
      else st.set(true);
    });
  });
}

void AgentRef::observe(const Placeholder& x) const {
  InputRef in = input_ref(*x.s_);
  core_->sync<bool>("observe " + id_, [id = id_, in](LoopState& loop, Sync<bool>& st) -> kj::Promise<void> {
    auto it = loop.agents.find(id);
    if (it == loop.agents.end()) throw Error(ErrorCode::unknown_agent, "no handle on agent " + id, id);
    auto req = it->second.observeRequest();
    write_input_ref(loop, in, req.initInput());
    return req.send().then([&st](capnp::Response<wire::Agent::ObserveResults> r) {
      if (r.hasError()) st.fail(detail::read_error(r.getError()));
      else st.set(true);
    });
  });
}

Value AgentRef::call(const std::string& method, const Value& args) const {
  return core_->sync<Value>(
      fmt::format("call {}.{}", id_, method),
      [id = id_, method, args](LoopState& loop, Sync<Value>& st) -> kj::Promise<void> {
        auto it = loop.agents.find(id);
        if (it == loop.agents.end()) throw Error(ErrorCode::unknown_agent, "no handle on agent " + id, id);
        auto req = it->second.callRequest();
        req.setMethod(detail::to_kj(method));
        detail::write_value(args, req.initArgs());
        return req.send().then([&st](capnp::Response<wire::Agent::CallResults> r) {
          auto o = r.getOutcome();
          if (o.isValue()) st.set(detail::read_value(o.getValue()));
          else st.fail(detail::read_error(o.getError()));
        });
      });
}

Placeholder AgentRef::call_async(const std::string& method, const Value& args) const {
  auto state = new_placeholder(core_, id_);
  core_->requests_.fetch_add(1, std::memory_order_relaxed);
  core_->post([c = core_.get(), id = id_, call_id = state->call_id, method, args,
               slot = state->slot]() {
    auto& loop = detail::loop_of(*c);
    auto it = loop.agents.find(id);
    if (it == loop.agents.end()) {
      slot->fail(Error(ErrorCode::unknown_agent, "this client has no handle on agent " + id, id));
      return;
    }
    auto req = it->second.callAsyncRequest();
    req.setMethod(detail::to_kj(method));
    detail::write_value(args, req.initArgs());
    req.setCallId(detail::to_kj(call_id));
    // The answer comes when the call is done, with the result inline when it is small; the
    // Result capability is there at once (pipelined) for passing the placeholder on.
    req.setInlineLimit(detail::kInlineLimit);
    auto promise = req.send();
    loop.results.emplace(call_id, promise.getResult());
    detail::take_outcome(loop, kj::mv(promise), call_id, slot);
  });
  return Placeholder(std::move(state));
}

std::vector<Msg> AgentRef::memory() const {
  return core_->sync<std::vector<Msg>>(
      "memory of " + id_,
      [id = id_](LoopState& loop, Sync<std::vector<Msg>>& st) -> kj::Promise<void> {
        auto it = loop.agents.find(id);
        if (it == loop.agents.end()) throw Error(ErrorCode::unknown_agent, "no handle on agent " + id, id);
        return it->second.memoryRequest().send().then(
            [&st](capnp::Response<wire::Agent::MemoryResults> r) {
              if (r.hasError()) {
                st.fail(detail::read_error(r.getError()));
                return;
              }
              std::vector<Msg> out;
              for (auto m : r.getMsgs()) out.push_back(detail::read_msg(m));
              st.set(std::move(out));
            });
      });
}

AgentInfo AgentRef::info() const {
  return core_->sync<AgentInfo>(
      "info of " + id_, [id = id_](LoopState& loop, Sync<AgentInfo>& st) -> kj::Promise<void> {
        auto it = loop.agents.find(id);
        if (it == loop.agents.end()) throw Error(ErrorCode::unknown_agent, "no handle on agent " + id, id);
        return it->second.infoRequest().send().then([&st](capnp::Response<wire::Agent::InfoResults> r) {
          if (r.hasError()) st.fail(detail::read_error(r.getError()));
          else st.set(detail::read_agent_info(r.getAgent()));
        });
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
  auto [host, port] = ref_endpoint(ref);
  return caller.services()->client_for(host, port).agent(ref[kRefKey]["id"].get<std::string>());
}

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
  struct Made {
    std::string id;
  };
  auto made = core_->sync<Made>(
      fmt::format("create {} agent", class_name),
      [class_name, name, args, id](LoopState& loop, Sync<Made>& st) -> kj::Promise<void> {
        auto req = loop.server.createAgentRequest();
        req.setClassName(detail::to_kj(class_name));
        req.setName(detail::to_kj(name));
        detail::write_value(args, req.initArgs());
        req.setAgentId(detail::to_kj(id));
        return req.send().then([&loop, &st](capnp::Response<wire::AgentServer::CreateAgentResults> r) {
          if (r.hasError()) {
            st.fail(detail::read_error(r.getError()));
            return;
          }
          std::string new_id = detail::to_std(r.getId());
          loop.agents.insert_or_assign(new_id, r.getAgent());
          st.set(Made{new_id});
        });
      });
  return AgentRef(core_, made.id, name.empty() ? made.id : name, class_name);
}

AgentRef Client::agent(const std::string& id) {
  auto info = core_->sync<AgentInfo>(
      "look up agent " + id, [id](LoopState& loop, Sync<AgentInfo>& st) -> kj::Promise<void> {
        auto req = loop.server.agentRequest();
        req.setId(detail::to_kj(id));
        return req.send().then([&loop, &st, id](capnp::Response<wire::AgentServer::AgentResults> r) {
          if (r.hasError()) {
            st.fail(detail::read_error(r.getError()));
            return kj::Promise<void>(kj::READY_NOW);
          }
          auto cap = r.getAgent();
          loop.agents.insert_or_assign(id, cap);
          return cap.infoRequest().send().then([&st](capnp::Response<wire::Agent::InfoResults> i) {
            if (i.hasError()) st.fail(detail::read_error(i.getError()));
            else st.set(detail::read_agent_info(i.getAgent()));
          });
        });
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
    return req.send().then([&loop, &st, id](capnp::Response<wire::AgentServer::DeleteAgentResults> r) {
      loop.agents.erase(id);
      if (r.hasError()) st.fail(detail::read_error(r.getError()));
      else st.set(true);
    });
  });
}

std::size_t Client::delete_all_agents() {
  return core_->sync<std::size_t>(
      "delete all agents", [](LoopState& loop, Sync<std::size_t>& st) -> kj::Promise<void> {
        return loop.server.deleteAllAgentsRequest().send().then(
            [&loop, &st](capnp::Response<wire::AgentServer::DeleteAllAgentsResults> r) {
              loop.agents.clear();
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
