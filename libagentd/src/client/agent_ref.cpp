#include "agent_ref.h"

#include "agent_services.h"
#include "call_batch.h"
#include "call_done.h"
#include "client_core.h"
#include "endpoint.h"
#include "info_codec.h"
#include "lanes.h"
#include "placeholder.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <fmt/format.h>

namespace agentd {

namespace detail {

namespace {
constexpr const char* kRefKey = "agentd_agent_ref";
}  // namespace

AgentAddress parse_agent_ref(const Value& ref) {
  if (!AgentRef::is_ref(ref))
    throw Error(ErrorCode::bad_args, "not an agent reference (expected the Value of AgentRef::to_value()): " +
                                         ref.dump(-1, ' ', false, Value::error_handler_t::replace));
  std::string address = ref[kRefKey].value("address", std::string{});
  AgentAddress out;
  auto endpoint = net::Endpoint::try_parse(address);
  if (!endpoint || endpoint->is_unix())
    throw Error(ErrorCode::bad_args, "the agent reference names no reachable server (\"" + address +
                                         "\"); agents in local mode cannot be reached from other processes");
  out.host = endpoint->host;
  out.port = endpoint->port;
  out.id = ref[kRefKey]["id"].get<std::string>();
  out.server_id = ref[kRefKey].value("server_id", std::string{});
  return out;
}

kj::Promise<void> agent_info(LoopState& loop, const std::string& id, Sync<AgentInfo>& st) {
  auto req = loop.server.agentRequest();
  req.setId(to_kj(id));
  return req.send().then([&st](capnp::Response<wire::AgentServer::AgentResults> r) {
    if (r.hasError()) {
      st.fail(read_error(r.getError()));
      return kj::Promise<void>(kj::READY_NOW);
    }
    return r.getAgent().infoRequest().send().then([&st](capnp::Response<wire::Agent::InfoResults> i) {
      if (i.hasError())
        st.fail(read_error(i.getError()));
      else
        st.set(read_agent_info(i.getAgent()));
    });
  });
}

}  // namespace detail

namespace {

// A call of kind on a, with a's deadline and trace (AgentRef::with_timeout, with_trace_id).
detail::OutSpec spec_of(const AgentRef& a, wire::CallKind kind) {
  auto spec = detail::spec_for(kind, a.id());
  spec.timeout_ms = static_cast<std::uint64_t>(a.timeout().count());
  if (!a.trace_id().empty()) spec.trace_id = a.trace_id();
  return spec;
}

// Queues an observe of spec's input and waits until the server has queued it.
void observe_sync(detail::ClientCore& core, const std::string& id, detail::OutSpec spec) {
  core.call_sync<bool>("observe " + id, std::move(spec), [](wire::CallDone::Reader d) {
    detail::throw_if_error(d);
    return true;
  });
}

}  // namespace

Placeholder AgentRef::reply(const Msg& x) const { return send_reply(nullptr, &x); }
Placeholder AgentRef::reply(const Placeholder& x) const { return send_reply(&x, nullptr); }
Placeholder AgentRef::reply() const { return send_reply(nullptr, nullptr); }
Placeholder AgentRef::reply_stream(const Msg& x) const { return send_reply(nullptr, &x, true); }
Placeholder AgentRef::reply_stream(const Placeholder& x) const { return send_reply(&x, nullptr, true); }

AgentRef AgentRef::with_timeout(std::chrono::milliseconds timeout) const {
  if (timeout.count() < 0)
    throw Error(
        ErrorCode::bad_args,
        fmt::format("with_timeout({} ms): a call deadline must be >= 0 (0: the server's)", timeout.count()),
        id_, class_name_);
  AgentRef ref = *this;
  ref.timeout_ = timeout;
  return ref;
}

AgentRef AgentRef::with_trace_id(std::string trace_id) const {
  if (auto why = detail::trace_id_problem(trace_id); !why.empty())
    throw Error(ErrorCode::bad_args, fmt::format("with_trace_id: {}", why), id_, class_name_);
  AgentRef ref = *this;
  ref.trace_id_ = std::move(trace_id);
  return ref;
}

Placeholder AgentRef::send_reply(const Placeholder* input, const Msg* msg, bool stream) const {
  auto state = detail::new_placeholder(core_, id_);
  auto spec = spec_of(*this, wire::CallKind::REPLY);
  spec.stream = stream;
  if (input)
    spec.ref = detail::input_ref(*input->s_);
  else if (msg)
    spec.msg = *msg;
  if (detail::LaneSet* lanes = core_->lanes(); lanes != nullptr && detail::LaneSet::eligible(spec)) {
    // Held back: on this thread's lane if get() follows (lanes.h), else on the connection.
    core_->check_open("call to agent '" + id_ + "'");
    core_->requests_.fetch_add(1, std::memory_order_relaxed);
    spec.call_id = state->call_id;
    spec.inline_limit = detail::kInlineLimit;
    state->deferred = lanes->hold(std::move(spec), state->slot, core_);
    return Placeholder(std::move(state));
  }
  detail::send_async(*core_, std::move(spec), *state);
  return Placeholder(std::move(state));
}

void AgentRef::observe(const Msg& x) const {
  auto spec = spec_of(*this, wire::CallKind::OBSERVE);
  spec.msg = x;
  observe_sync(*core_, id_, std::move(spec));
}

void AgentRef::observe(const Placeholder& x) const {
  auto spec = spec_of(*this, wire::CallKind::OBSERVE);
  spec.ref = detail::input_ref(*x.s_);
  observe_sync(*core_, id_, std::move(spec));
}

Value AgentRef::call(const std::string& method, const Value& args) const {
  auto spec = spec_of(*this, wire::CallKind::METHOD);
  spec.method = method;
  spec.args = args;
  return core_->call_sync<Value>(
      fmt::format("call {}.{}", id_, method), std::move(spec), [](wire::CallDone::Reader d) {
        detail::throw_if_error(d);
        if (!d.isValue()) throw Error(ErrorCode::internal, "the server answered a method call oddly");
        auto o = d.getValue();
        if (o.isError()) throw detail::read_error(o.getError());
        return detail::read_value(o.getValue());
      });
}

Placeholder AgentRef::call_async(const std::string& method, const Value& args) const {
  auto state = detail::new_placeholder(core_, id_);
  auto spec = spec_of(*this, wire::CallKind::METHOD_ASYNC);
  spec.method = method;
  spec.args = args;
  detail::send_async(*core_, std::move(spec), *state);
  return Placeholder(std::move(state));
}

std::vector<Msg> AgentRef::memory() const {
  return core_->call_sync<std::vector<Msg>>("memory of " + id_, spec_of(*this, wire::CallKind::MEMORY),
                                            [](wire::CallDone::Reader d) {
                                              detail::throw_if_error(d);
                                              std::vector<Msg> out;
                                              if (d.isMemory())
                                                for (auto m : d.getMemory())
                                                  out.push_back(detail::read_msg(m));
                                              return out;
                                            });
}

AgentInfo AgentRef::info() const {
  return core_->sync<AgentInfo>(
      "info of " + id_,
      [id = id_](detail::LoopState& loop, detail::Sync<AgentInfo>& st) -> kj::Promise<void> {
        return detail::agent_info(loop, id, st);
      });
}

Value AgentRef::to_value() const {
  using detail::kRefKey;
  return Value{{kRefKey,
                {{"id", id_},
                 {"name", name_},
                 {"class", class_name_},
                 {"address", core_->address()},
                 {"server_id", core_->server_id()}}}};
}

bool AgentRef::is_ref(const Value& v) {
  using detail::kRefKey;
  return v.is_object() && v.contains(kRefKey) && v[kRefKey].is_object() && v[kRefKey].contains("id") &&
         v[kRefKey]["id"].is_string();
}

AgentRef AgentRef::from_value(const Value& ref, ClientOptions options) {
  auto where = detail::parse_agent_ref(ref);
  auto client = Client::connect(where.host, where.port, options);
  return client.agent(where.id);
}

AgentRef connect_agent(Agent& caller, const Value& ref) {
  if (caller.services() == nullptr) return AgentRef::from_value(ref);
  auto where = detail::parse_agent_ref(ref);
  // The hosting server's shared link to that server (no connection or thread of its own).
  auto link = std::dynamic_pointer_cast<detail::ClientLink>(
      caller.services()->link_to(where.host, where.port, where.server_id));
  if (!link) throw Error(ErrorCode::internal, "this server's agent connector made no client link");
  auto core = std::move(link->core);
  if (detail::AsyncLoop* loop = detail::current_async_loop(); loop != nullptr && loop->on_loop_thread()) {
    // Asynchronous agent code must not wait here: the reference's own name and class stand in
    // for the lookup, and a missing agent fails the first call (unknown_agent) instead.
    const Value& r = ref[detail::kRefKey];
    return AgentRef(std::move(core), where.id, r.value("name", std::string{}),
                    r.value("class", std::string{}));
  }
  auto info = core->sync<AgentInfo>(
      "look up agent " + where.id,
      [id = where.id](detail::LoopState& loop, detail::Sync<AgentInfo>& st) -> kj::Promise<void> {
        return detail::agent_info(loop, id, st);
      });
  return AgentRef(std::move(core), info.id, info.name, info.class_name);
}

}  // namespace agentd
