// The hosted agents (a blocking and an asynchronous kind), the class registry, and loading.
// The asyncio thread and the watchdog are in host_state.cpp.
#include "hosting.h"

#include "hosted_agent.h"
#include "values.h"

#include <agentd/msg.h>

#include <coroutine>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

namespace agentd::python {

namespace {

// The thread state Gil keeps for its thread, made on first use and freed when the thread ends
// (the host's worker pool retires idle threads).
struct KeptThreadState {
  PyThreadState* state = nullptr;
  PyGILState_STATE first{};
  ~KeptThreadState() {
    if (state == nullptr || !Py_IsInitialized()) return;
    PyEval_RestoreThread(state);
    PyGILState_Release(first);  // the count drops to zero: the state is freed, the GIL released
  }
};

}  // namespace

Gil::Gil() {
  static thread_local KeptThreadState kept;
  if (kept.state == nullptr) {
    // The first time on this thread: make its thread state and keep it (the count stays at one).
    kept.first = PyGILState_Ensure();
    kept.state = PyEval_SaveThread();
  }
  state_ = PyGILState_Ensure();
}

Gil::~Gil() { PyGILState_Release(state_); }

namespace {

std::map<std::string, std::shared_ptr<ClassInfo>>& registry() {
  static auto* classes = new std::map<std::string, std::shared_ptr<ClassInfo>>();  // never freed
  return *classes;
}

py::module_ agent_module() { return py::module_::import("agentd.agent"); }

// reply()'s argument: None when the call carried no message (AgentRef::reply()).
py::object msg_arg(const Msg& x) { return x.id.empty() ? py::object(py::none()) : py::cast(x); }

// Runs a named method: fn(**args) for an object, fn() for null, fn(args) for anything else.
py::object call_method(py::object& self, const ClassInfo& info, const std::string& method,
                       const Value& args) {
  if (info.methods.find(method) == info.methods.end()) {
    std::string known;
    for (const auto& [n, _] : info.methods) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::unknown_method,
                "agent class '" + info.name + "' has no method '" + method + "' (its methods: " +
                    (known.empty() ? "none; expose one with @agentd.method" : known) + ")");
  }
  py::object fn = self.attr(method.c_str());
  if (args.is_object()) return fn(**py::reinterpret_borrow<py::dict>(from_value(args)));
  if (args.is_null()) return fn();
  return fn(from_value(args));
}

bool is_coroutine(const py::handle& r) {
  static PyObject* iscoroutine = nullptr;
  if (iscoroutine == nullptr)
    iscoroutine = py::object(py::module_::import("asyncio").attr("iscoroutine")).release().ptr();
  return PyObject_IsTrue(py::handle(iscoroutine)(r).ptr()) == 1;
}

// A coroutine a blocking agent got (an `async def` method): run on the host's asyncio thread,
// waited for here (Python's wait releases the GIL).
py::object run_blocking(py::object coro) {
  py::object fut = py::module_::import("asyncio").attr("run_coroutine_threadsafe")(
      coro, HostState::get().completions()->loop());
  return fut.attr("result")();
}

// Builds the Python object, its context attached before __init__ runs. GIL held.
py::object construct(const ClassInfo& info, const std::shared_ptr<AgentContext>& ctx, const std::string& name,
                     const Value& args) {
  py::dict kwargs;
  if (args.is_object()) {
    kwargs = py::reinterpret_borrow<py::dict>(from_value(args));
  } else if (!args.is_null()) {
    throw Error(ErrorCode::bad_args, "agent class '" + info.name +
                                         "' takes its arguments as a JSON object (keyword arguments), not " +
                                         std::string(args.type_name()));
  }
  return agent_module().attr("_construct")(info.cls, py::cast(ctx), name, kwargs);
}

// A call into the Python object on the calling thread, failures turned into the host's.
template <typename F>
auto guarded(F f) -> decltype(f()) {
  try {
    return f();
  } catch (py::error_already_set& e) {
    std::rethrow_exception(python_failure(e));
  }
}

class PyBlockingAgent final : public Agent, public HostedAgent {
 public:
  PyBlockingAgent(AgentInit init, std::shared_ptr<ClassInfo> info)
      : Agent(std::move(init)), info_(std::move(info)), ctx_(std::make_shared<AgentContext>()) {
    Gil gil;
    ctx_->host = this;
    guarded([&] { self_ = construct(*info_, ctx_, name(), args()); });
  }
  ~PyBlockingAgent() override {
    Gil gil;
    ctx_->host = nullptr;
    self_ = py::object();
  }

  Msg reply(const Msg& x) override {
    Gil gil;
    return guarded([&] { return reply_msg(settle(self_.attr("reply")(msg_arg(x))), name()); });
  }
  void observe(const Msg& x) override {
    if (!info_->custom_observe) return Agent::observe(x);
    Gil gil;
    guarded([&] { settle(self_.attr("observe")(py::cast(x))); });
  }
  Value call(const std::string& method, const Value& args) override {
    Gil gil;
    return guarded([&] { return to_value(settle(call_method(self_, *info_, method, args))); });
  }
  Value save_state() const override {
    if (!info_->custom_state) return nullptr;
    Gil gil;
    return guarded([&] { return to_value(self_.attr("save_state")()); });
  }
  void load_state(const Value& state) override {
    if (!info_->custom_state && state.is_null()) return;
    Gil gil;
    guarded([&] { self_.attr("load_state")(from_value(state)); });
  }

  Agent& agent() override { return *this; }
  const ClassInfo& info() const override { return *info_; }
  py::object& self() override { return self_; }
  void chunk(std::string_view text) override { emit_chunk(text); }
  bool is_streaming() const override { return streaming(); }

 private:
  static py::object settle(py::object r) { return is_coroutine(r) ? run_blocking(std::move(r)) : r; }

  std::shared_ptr<ClassInfo> info_;
  std::shared_ptr<AgentContext> ctx_;
  py::object self_;
};

// One call of an asynchronous agent, shared by its coroutine (on the server's loop) and the
// asyncio thread. Inputs are written before the call is posted, results before the coroutine is
// resumed; task is touched on the asyncio thread only.
struct PyCall {
  enum class Kind { reply, observe, method } kind = Kind::reply;
  std::shared_ptr<AgentContext> ctx;
  Msg input;
  std::string method;
  Value args;

  Msg msg;
  Value value;
  std::exception_ptr error;

  detail::AsyncLoop* loop = nullptr;
  std::coroutine_handle<> handle;
  std::shared_ptr<bool> alive;
  std::atomic<bool> finished{false};
  SharedObject task;
};

void resume(const std::shared_ptr<PyCall>& c) {
  c->finished.store(true);
  c->loop->resume(c->handle, c->alive);
}

// Asyncio thread, GIL held: the call's value is there (r: what reply/observe/the method gave).
void finish(const std::shared_ptr<PyCall>& c, const py::handle& r);

void start_call(const std::shared_ptr<PyCall>& c) {
  try {
    HostedAgent& h = c->ctx->get();
    py::object r;
    switch (c->kind) {
      case PyCall::Kind::reply:
        r = h.self().attr("reply")(msg_arg(c->input));
        break;
      case PyCall::Kind::observe:
        r = h.self().attr("observe")(py::cast(c->input));
        break;
      case PyCall::Kind::method:
        r = call_method(h.self(), h.info(), c->method, c->args);
        break;
    }
    if (!is_coroutine(r)) return finish(c, r);
    py::object task = HostState::get().completions()->loop().attr("create_task")(r);
    c->task = share_object(task);
    task.attr("add_done_callback")(py::cpp_function([c](py::object t) {
      c->task.reset();
      if (t.attr("cancelled")().cast<bool>()) {
        c->error = std::make_exception_ptr(
            std::runtime_error("CancelledError: the call's asyncio task was cancelled"));
        return resume(c);
      }
      py::object exc = t.attr("exception")();
      if (!exc.is_none()) {
        c->error = python_failure(exc);
        return resume(c);
      }
      finish(c, t.attr("result")());
    }));
  } catch (py::error_already_set& e) {
    c->error = python_failure(e);
    resume(c);
  } catch (...) {
    c->error = std::current_exception();
    resume(c);
  }
}

// The state an async agent saves is taken here, on the asyncio thread right after each call,
// since the host asks for it on its event loop, which must not wait for the GIL.
class PyAsyncAgent;
void cache_state(HostedAgent& h);

void finish(const std::shared_ptr<PyCall>& c, const py::handle& r) {
  try {
    HostedAgent& h = c->ctx->get();
    if (c->kind == PyCall::Kind::reply) c->msg = reply_msg(r, h.agent().name());
    if (c->kind == PyCall::Kind::method) c->value = to_value(r);
    cache_state(h);
  } catch (py::error_already_set& e) {
    c->error = python_failure(e);
  } catch (...) {
    c->error = std::current_exception();
  }
  resume(c);
}

struct PyCallAwaiter {
  std::shared_ptr<PyCall> call;
  detail::AliveFlag flag;

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    call->loop = &detail::require_async_loop("a Python agent's call");
    call->handle = h;
    call->alive = flag.alive;
    HostState::get().note_server_loop(call->loop);
    if (!HostState::get().post([c = call] { start_call(c); })) {
      call->error = std::make_exception_ptr(Error(ErrorCode::internal, "the Python host has stopped"));
      resume(call);
    }
  }
  void await_resume() const {
    if (call->error) std::rethrow_exception(call->error);
  }
  PyCallAwaiter(std::shared_ptr<PyCall> c) : call(std::move(c)) {}
  PyCallAwaiter(const PyCallAwaiter&) = delete;
  PyCallAwaiter& operator=(const PyCallAwaiter&) = delete;
  ~PyCallAwaiter() {
    // The call was abandoned (its coroutine destroyed, e.g. at a deadline): cancel the task.
    if (call->loop != nullptr && !call->finished.load())
      HostState::get().post([c = call] {
        if (c->task) c->task->attr("cancel")();
      });
  }
};

std::shared_ptr<PyCall> new_call(PyCall::Kind kind, std::shared_ptr<AgentContext> ctx) {
  auto c = std::make_shared<PyCall>();
  c->kind = kind;
  c->ctx = std::move(ctx);
  return c;
}

class PyAsyncAgent final : public AsyncAgent, public HostedAgent {
 public:
  PyAsyncAgent(AgentInit init, std::shared_ptr<ClassInfo> info)
      : AsyncAgent(std::move(init)), info_(std::move(info)), ctx_(std::make_shared<AgentContext>()) {
    Gil gil;
    ctx_->host = this;
    guarded([&] { self_ = construct(*info_, ctx_, name(), args()); });
    cache_state(*this);
  }
  ~PyAsyncAgent() override {
    Gil gil;
    ctx_->host = nullptr;
    self_ = py::object();
  }

  Task<Msg> reply_async(const Msg& x) override {
    auto c = new_call(PyCall::Kind::reply, ctx_);
    c->input = x;
    co_await PyCallAwaiter(c);
    co_return std::move(c->msg);
  }
  Task<void> observe_async(const Msg& x) override {
    if (!info_->custom_observe) {
      Agent::observe(x);
      co_return;
    }
    auto c = new_call(PyCall::Kind::observe, ctx_);
    c->input = x;
    co_await PyCallAwaiter(c);
  }
  Task<Value> call_async(const std::string& method, const Value& args) override {
    auto c = new_call(PyCall::Kind::method, ctx_);
    c->method = method;
    c->args = args;
    co_await PyCallAwaiter(c);
    co_return std::move(c->value);
  }
  Value save_state() const override {
    std::lock_guard lock(state_mu_);
    return state_;
  }
  void load_state(const Value& state) override {
    if (!info_->custom_state && state.is_null()) return;
    Gil gil;
    guarded([&] { self_.attr("load_state")(from_value(state)); });
    cache_state(*this);
  }

  Agent& agent() override { return *this; }
  const ClassInfo& info() const override { return *info_; }
  py::object& self() override { return self_; }
  void chunk(std::string_view text) override { emit_chunk(text); }
  bool is_streaming() const override { return streaming(); }

  void set_state(Value v) {
    std::lock_guard lock(state_mu_);
    state_ = std::move(v);
  }

 private:
  std::shared_ptr<ClassInfo> info_;
  std::shared_ptr<AgentContext> ctx_;
  py::object self_;
  mutable std::mutex state_mu_;
  Value state_;
};

void cache_state(HostedAgent& h) {
  if (!h.info().custom_state) return;
  if (auto* a = dynamic_cast<PyAsyncAgent*>(&h)) a->set_state(to_value(h.self().attr("save_state")()));
}

}  // namespace

Msg reply_msg(const py::handle& r, const std::string& name) {
  if (py::isinstance<Msg>(r)) return r.cast<Msg>();
  return Msg(name, to_value(r), "assistant");
}

std::exception_ptr python_failure(py::error_already_set& e) {
  py::object exc = e.value();
  // pybind11 keeps the traceback apart from the exception: put it back for the message.
  auto tb = py::reinterpret_steal<py::object>(PyException_GetTraceback(exc.ptr()));
  if (!tb && e.trace()) PyException_SetTraceback(exc.ptr(), e.trace().ptr());
  return python_failure(exc);
}

std::exception_ptr python_failure(const py::handle& exc) {
  try {
    if (py::hasattr(exc, "code") && py::hasattr(exc, "retryable") && py::hasattr(exc, "agent_class")) {
      // An agentd.Error (a model call's, another agent's, or one raised on purpose) keeps its code.
      return std::make_exception_ptr(
          Error(error_code_from_string(py::str(exc.attr("code")).cast<std::string>()),
                py::str(exc).cast<std::string>(), "", "", exc.attr("retryable").cast<bool>()));
    }
    std::string text = agent_module().attr("_format_exception")(exc).cast<std::string>();
    return std::make_exception_ptr(std::runtime_error(text));
  } catch (py::error_already_set& inner) {
    return std::make_exception_ptr(
        std::runtime_error(std::string("a Python exception that cannot be shown: ") + inner.what()));
  }
}

std::vector<LoadedClass> load_agent_classes(const std::vector<std::string>& dirs) {
  std::vector<LoadedClass> out;
  py::list found;
  try {
    found = agent_module().attr("_load_agent_dirs")(dirs);
  } catch (py::error_already_set& e) {
    throw std::runtime_error(py::str(e.value()).cast<std::string>());
  }
  for (auto item : found) {
    auto t = item.cast<py::tuple>();
    auto info = std::make_shared<ClassInfo>();
    info->name = t[0].cast<std::string>();
    info->source = t[1].cast<std::string>();
    info->cls = t[2];
    auto d = t[3].cast<py::dict>();
    info->async_reply = d["async_reply"].cast<bool>();
    info->async_observe = d["async_observe"].cast<bool>();
    info->custom_observe = d["custom_observe"].cast<bool>();
    info->custom_state = d["custom_state"].cast<bool>();
    for (auto m : d["methods"].cast<py::dict>())
      info->methods[m.first.cast<std::string>()] = m.second.cast<bool>();
    registry()[info->name] = info;
    out.push_back(LoadedClass{info->name, info->source});
  }
  HostState::get().start();
  return out;
}

std::unique_ptr<Agent> make_python_agent(AgentInit init) {
  auto it = registry().find(init.class_name);
  if (it == registry().end())
    throw Error(ErrorCode::unknown_class, "no Python agent class '" + init.class_name + "'");
  std::shared_ptr<ClassInfo> info = it->second;
  if (info->async_reply) return std::make_unique<PyAsyncAgent>(std::move(init), std::move(info));
  return std::make_unique<PyBlockingAgent>(std::move(init), std::move(info));
}

void stop_python_host() { HostState::get().stop(); }

std::uint64_t python_loop_stalls() { return HostState::get().stalls(); }

}  // namespace agentd::python
