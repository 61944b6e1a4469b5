// The `agentd` Python module (its compiled part, agentd._agentd): the C++ client API in Python's
// idiom. Built on the public headers only (agentd::client); one translation unit.
//
// Threads and the GIL: every call that may wait (on the network, a child server or a result)
// releases the GIL; Python values are converted to C++ before and back after, with it held.
// Placeholder waits run in short slices and check for signals between them, so Ctrl-C
// interrupts a get() with KeyboardInterrupt.
#include <agentd/client.h>
#include <agentd/cluster.h>
#include <agentd/error.h>
#include <agentd/msg.h>
#include <agentd/value.h>
#include <agentd/value_limits.h>
#include <agentd/version.h>

#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;
using namespace std::chrono_literals;

namespace agentd::python {

using Millis = std::chrono::milliseconds;

Millis to_millis(double seconds) {
  if (!(seconds >= 0)) throw py::value_error("a timeout must be a number of seconds >= 0");
  return Millis(static_cast<std::int64_t>(std::llround(std::min(seconds, 1e12) * 1000)));
}

// ---- values: Python objects <-> agentd::Value (nlohmann::json), both ways without loss ----

// depth: how many lists and dicts o is inside. Deeper than kMaxValueDepth is refused (ValueError
// naming the limit) before recursing further, so a deep or self-containing object cannot
// overflow the stack.
Value to_value(const py::handle& o, int depth = 0) {
  if (o.is_none()) return nullptr;
  if (PyBool_Check(o.ptr())) return o.ptr() == Py_True;
  if (PyLong_Check(o.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
    if (overflow == 0) {
      if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
      return static_cast<std::int64_t>(v);
    }
    if (overflow > 0) {
      unsigned long long u = PyLong_AsUnsignedLongLong(o.ptr());
      if (!PyErr_Occurred()) return static_cast<std::uint64_t>(u);
      PyErr_Clear();
    }
    throw py::value_error("agentd: an int outside the 64-bit range cannot be sent");
  }
  if (PyFloat_Check(o.ptr())) return PyFloat_AsDouble(o.ptr());
  if (PyUnicode_Check(o.ptr())) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(o.ptr(), &size);
    if (data == nullptr) throw py::error_already_set();
    return std::string(data, static_cast<std::size_t>(size));
  }
  if (PyBytes_Check(o.ptr()) || PyByteArray_Check(o.ptr()) || PyMemoryView_Check(o.ptr())) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(o).request();
    if (info.itemsize != 1 || info.ndim > 1)
      throw py::type_error("agentd: only byte buffers can be sent as binary");
    auto* p = static_cast<const std::uint8_t*>(info.ptr);
    return Value::binary(std::vector<std::uint8_t>(p, p + info.size));
  }
  const bool container = PyDict_Check(o.ptr()) || PyList_Check(o.ptr()) || PyTuple_Check(o.ptr());
  if (container && depth >= kMaxValueDepth)
    throw py::value_error("agentd: a value nested deeper than " + std::to_string(kMaxValueDepth) +
                          " levels of lists, tuples and dicts cannot be sent (the most a value may "
                          "nest; a list that contains itself never ends)");
  if (PyDict_Check(o.ptr())) {
    Value out = Value::object();
    for (auto item : py::reinterpret_borrow<py::dict>(o)) {
      if (!PyUnicode_Check(item.first.ptr()))
        throw py::type_error("agentd: dict keys must be str, not " +
                             std::string(py::str(py::type::of(item.first).attr("__name__"))));
      out[item.first.cast<std::string>()] = to_value(item.second, depth + 1);
    }
    return out;
  }
  if (PyList_Check(o.ptr()) || PyTuple_Check(o.ptr())) {
    Value out = Value::array();
    for (auto item : py::reinterpret_borrow<py::sequence>(o)) out.push_back(to_value(item, depth + 1));
    return out;
  }
  if (py::isinstance<Msg>(o)) return to_json(o.cast<const Msg&>());
  // An AgentRef (nested agents): its reference value.
  if (py::hasattr(o, "to_value") && py::hasattr(o, "class_name"))
    return to_value(o.attr("to_value")(), depth);
  throw py::type_error("agentd: cannot send a value of type " +
                       std::string(py::str(py::type::of(o).attr("__name__"))) +
                       " (dict, list, tuple, str, int, float, bool, None or bytes)");
}

py::object from_value(const Value& v) {
  switch (v.type()) {
    case Value::value_t::null: return py::none();
    case Value::value_t::boolean: return py::bool_(v.get<bool>());
    case Value::value_t::number_integer: return py::int_(v.get<std::int64_t>());
    case Value::value_t::number_unsigned: return py::int_(v.get<std::uint64_t>());
    case Value::value_t::number_float: return py::float_(v.get<double>());
    case Value::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      return py::reinterpret_steal<py::object>(
          PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape"));
    }
    case Value::value_t::binary: {
      const auto& b = v.get_binary();
      return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
    }
    case Value::value_t::array: {
      py::list out(v.size());
      std::size_t i = 0;
      for (const auto& e : v) out[i++] = from_value(e);
      return out;
    }
    case Value::value_t::object: {
      py::dict out;
      for (const auto& [k, e] : v.items()) out[py::str(k)] = from_value(e);
      return out;
    }
    case Value::value_t::discarded: break;
  }
  return py::none();
}

// The as_server child mode uses when neither server_path nor $AGENTD_AS_SERVER names one (set by
// the package's __init__ in a build tree: build/bin/as_server). Only touched with the GIL held.
std::string& default_server_path() {
  static std::string path;
  return path;
}

Value args_value(const py::object& o) { return o.is_none() ? Value::object() : to_value(o); }

// ---- errors: agentd::Error -> agentd.Error (a RuntimeError with code, agent_id, ...) ----

py::object& error_type() {
  static py::object* type = nullptr;  // set once at import, owned by the module (never freed)
  if (type == nullptr) type = new py::object();
  return *type;
}

// ---- the client and what it hands out ----

// The C++ client behind a Python Client; close() drops it (stopping a child server). Objects it
// handed out keep working until then and fail with Error(disconnected) after.
struct ClientBox {
  std::shared_ptr<Client> client;
  bool child = false;
  Millis timeout{};
  std::mutex mu;

  std::shared_ptr<Client> get() {
    std::lock_guard lock(mu);
    if (!client) throw Error(ErrorCode::disconnected, "the agentd client is closed");
    return client;
  }
  void check_open() { (void)get(); }
};

class PyPlaceholder {
 public:
  PyPlaceholder(Placeholder p, std::shared_ptr<ClientBox> box)
      : p_(std::move(p)), box_(std::move(box)) {}

  // Waits (GIL released, in slices, checking for Ctrl-C between them) and returns the message.
  const Msg& get(std::optional<double> timeout) {
    if (cached_) return *cached_;
    Millis total = timeout ? to_millis(*timeout) : box_->timeout;
    auto deadline = std::chrono::steady_clock::now() + total;
    for (;;) {
      auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
      bool last = left <= kSlice;
      try {
        std::optional<Msg> m;
        {
          py::gil_scoped_release release;
          m = p_.get(std::max(std::min(left, kSlice), Millis(0)));
        }
        cached_ = std::make_shared<Msg>(std::move(*m));
        return *cached_;
      } catch (const Error& e) {
        if (!is_wait_timeout(e)) throw;
        if (last) throw whole_wait(e, total);
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }
  const Placeholder& placeholder() const { return p_; }

  // The next chunk of a streamed reply (reply_stream) as str, or None once the reply is
  // complete; raises the call's agentd.Error after the chunks sent before a failure. Waits like
  // get() (GIL released, in slices, Ctrl-C between them).
  py::object next_chunk(std::optional<double> timeout) {
    Millis total = timeout ? to_millis(*timeout) : box_->timeout;
    auto deadline = std::chrono::steady_clock::now() + total;
    for (;;) {
      auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
      bool last = left <= kSlice;
      try {
        std::optional<std::string> c;
        {
          py::gil_scoped_release release;
          c = p_.next_chunk(std::max(std::min(left, kSlice), Millis(0)));
        }
        if (!c) return py::none();
        // A model may cut a character between chunks: undecodable bytes become U+FFFD.
        return py::reinterpret_steal<py::object>(
            PyUnicode_DecodeUTF8(c->data(), static_cast<Py_ssize_t>(c->size()), "replace"));
      } catch (const Error& e) {
        if (!is_chunk_wait_timeout(e)) throw;
        if (last) throw whole_wait(e, total);
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

 private:
  static constexpr Millis kSlice = 50ms;
  // The timeout error of the last slice, saying the whole wait ("within 500 ms"), not the slice's.
  static Error whole_wait(const Error& e, Millis total) {
    std::string text = e.message();
    if (auto at = text.rfind(" within "); at != std::string::npos)
      text = text.substr(0, at) + " within " + std::to_string(total.count()) + " ms";
    return Error(e.code(), std::move(text), e.agent_id(), e.agent_class(), e.retryable());
  }
  static bool is_chunk_wait_timeout(const Error& e) {
    return e.code() == ErrorCode::timeout && e.agent_class().empty() &&
           e.message().find("no chunk of call") != std::string::npos;
  }
  // The timeout get() throws when its own wait runs out (not a producer's error with code timeout,
  // which names the agent's class).
  static bool is_wait_timeout(const Error& e) {
    return e.code() == ErrorCode::timeout && e.agent_class().empty() &&
           e.message().find("was not ready within") != std::string::npos;
  }
  Placeholder p_;
  std::shared_ptr<ClientBox> box_;
  std::shared_ptr<Msg> cached_;
};

class PyAgentRef {
 public:
  PyAgentRef(AgentRef r, std::shared_ptr<ClientBox> box) : r_(std::move(r)), box_(std::move(box)) {}

  const AgentRef& ref() const { return r_; }
  PyPlaceholder wrap(Placeholder p) const { return PyPlaceholder(std::move(p), box_); }

  PyPlaceholder reply(const py::object& x) const {
    if (x.is_none()) {
      box_->check_open();
      py::gil_scoped_release release;
      return wrap(r_.reply());
    }
    return with_input(x, "reply takes a Msg, a Placeholder or None",
                      [this](const auto& in) { return wrap(r_.reply(in)); });
  }
  PyPlaceholder reply_stream(const py::object& x) const {
    return with_input(x, "reply_stream takes a Msg or a Placeholder",
                      [this](const auto& in) { return wrap(r_.reply_stream(in)); });
  }
  void observe(const py::object& x) const {
    with_input(x, "observe takes a Msg or a Placeholder", [this](const auto& in) { r_.observe(in); });
  }
  py::object call(const std::string& method, const py::object& args) const {
    box_->check_open();
    Value a = args_value(args);
    Value out;
    {
      py::gil_scoped_release release;
      out = r_.call(method, a);
    }
    return from_value(out);
  }
  PyPlaceholder call_async(const std::string& method, const py::object& args) const {
    box_->check_open();
    Value a = args_value(args);
    py::gil_scoped_release release;
    return wrap(r_.call_async(method, a));
  }
  std::vector<Msg> memory() const {
    box_->check_open();
    py::gil_scoped_release release;
    return r_.memory();
  }
  AgentInfo info() const {
    box_->check_open();
    py::gil_scoped_release release;
    return r_.info();
  }

 private:
  // Runs f with x as the C++ input (a Placeholder, never waited for here, or a Msg), the GIL
  // released; anything else raises TypeError("agentd: " + usage).
  template <typename F>
  auto with_input(const py::object& x, const char* usage, F f) const
      -> decltype(f(std::declval<const Msg&>())) {
    box_->check_open();
    if (py::isinstance<PyPlaceholder>(x)) {
      Placeholder in = x.cast<const PyPlaceholder&>().placeholder();
      py::gil_scoped_release release;
      return f(in);
    }
    if (py::isinstance<Msg>(x)) {
      Msg m = x.cast<const Msg&>();
      py::gil_scoped_release release;
      return f(m);
    }
    throw py::type_error(std::string("agentd: ") + usage);
  }

  AgentRef r_;
  std::shared_ptr<ClientBox> box_;
};

class PyClient {
 public:
  PyClient(Client c, bool child, Millis timeout) : box_(std::make_shared<ClientBox>()) {
    box_->client = std::make_shared<Client>(std::move(c));
    box_->child = child;
    box_->timeout = timeout;
  }
  ~PyClient() {
    try {
      close();
    } catch (...) {
    }
  }

  // Closes and drops the C++ client; in child mode the child server is stopped first. The
  // connection goes now even while AgentRefs or Placeholders of this client are still alive in
  // Python.
  void close() {
    std::shared_ptr<Client> c;
    {
      std::lock_guard lock(box_->mu);
      c.swap(box_->client);
    }
    if (!c) return;
    auto release = maybe_release_gil();
    if (box_->child) {
      try {
        c->stop();
      } catch (const Error&) {
      }
    }
    // Closes the connection (and its reconnecting) even while AgentRefs hold the client core.
    c->close();
    c.reset();
  }
  bool closed() {
    std::lock_guard lock(box_->mu);
    return !box_->client;
  }

  PyAgentRef wrap(AgentRef r) const { return PyAgentRef(std::move(r), box_); }
  std::shared_ptr<Client> get() const { return box_->get(); }
  Millis timeout() const { return box_->timeout; }

 private:
  // close() runs from __exit__ (GIL held) and from the destructor (maybe during interpreter
  // shutdown, GIL held too): release it while the child stops.
  static std::optional<py::gil_scoped_release> maybe_release_gil() {
    std::optional<py::gil_scoped_release> r;
    if (Py_IsInitialized() && PyGILState_Check()) r.emplace();
    return r;
  }
  std::shared_ptr<ClientBox> box_;
};

// Runs f(client) with the GIL released.
template <typename F>
auto released(const PyClient& self, F&& f) {
  auto c = self.get();
  py::gil_scoped_release release;
  return f(*c);
}

// agentd.Cluster: one client over several servers. Each member's Client gets its own ClientBox
// (an aliasing pointer into the shared Cluster), so the refs it makes behave as a Client's do;
// close() drops them all (and stops the children of spawn_children).
class PyCluster {
 public:
  PyCluster(Cluster c, bool children, Millis timeout)
      : cluster_(std::make_shared<Cluster>(std::move(c))), children_(children), timeout_(timeout) {}
  ~PyCluster() {
    try {
      close();
    } catch (...) {
    }
  }

  std::shared_ptr<Cluster> get() const {
    std::lock_guard lock(mu_);
    if (!cluster_) throw Error(ErrorCode::disconnected, "the agentd cluster is closed");
    return cluster_;
  }
  // The ref with the box of the member whose client made it.
  PyAgentRef wrap(AgentRef r) {
    auto c = get();
    auto address = r.to_value()["agentd_agent_ref"].value("address", std::string());
    std::lock_guard lock(mu_);
    if (auto it = boxes_.find(address); it != boxes_.end()) return PyAgentRef(std::move(r), it->second);
    for (std::size_t i = 0; i < c->size(); ++i) {
      Client* client = nullptr;
      try {
        client = &c->server(i);
      } catch (const Error&) {  // a member down: not the one
        continue;
      }
      if (client->address() != address) continue;
      auto box = std::make_shared<ClientBox>();
      box->client = std::shared_ptr<Client>(c, client);
      box->timeout = timeout_;
      boxes_[address] = box;
      return PyAgentRef(std::move(r), box);
    }
    throw Error(ErrorCode::internal, "agentd: no member of the cluster made agent " + r.id());
  }
  std::vector<PyAgentRef> wrap_all(std::vector<AgentRef> refs) {
    std::vector<PyAgentRef> out;
    out.reserve(refs.size());
    for (auto& r : refs) out.push_back(wrap(std::move(r)));
    return out;
  }
  void close() {
    std::shared_ptr<Cluster> c;
    {
      std::lock_guard lock(mu_);
      c.swap(cluster_);
      for (auto& [address, box] : boxes_) {
        std::lock_guard box_lock(box->mu);
        box->client.reset();
      }
      boxes_.clear();
    }
    if (!c) return;
    std::optional<py::gil_scoped_release> release;
    if (children_ && Py_IsInitialized() && PyGILState_Check()) release.emplace();
    // As Client.close: the children stop now, even while refs or placeholders are alive.
    for (std::size_t i = 0; children_ && i < c->size(); ++i) {
      try {
        c->server(i).stop();
      } catch (const Error&) {
      }
    }
    c.reset();
  }
  bool closed() const {
    std::lock_guard lock(mu_);
    return !cluster_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Cluster> cluster_;
  std::map<std::string, std::shared_ptr<ClientBox>> boxes_;  // by the member client's address
  bool children_ = false;
  Millis timeout_{};
};

// Runs f(cluster) with the GIL released.
template <typename F>
auto released(const PyCluster& self, F&& f) {
  auto c = self.get();
  py::gil_scoped_release release;
  return f(*c);
}

Placement placement_named(const std::string& name) {
  if (name == "round_robin") return Placement::round_robin;
  if (name == "least_loaded") return Placement::least_loaded;
  throw Error(ErrorCode::bad_args, "agentd: placement must be 'round_robin' or 'least_loaded', not '" +
                                       name + "'");
}

std::string repr_msg(const Msg& m) {
  return "Msg(name=" + std::string(py::repr(py::str(m.name))) + ", role=" +
         std::string(py::repr(py::str(m.role))) + ", content=" +
         std::string(py::repr(from_value(m.content))).substr(0, 80) + ")";
}

}  // namespace agentd::python

PYBIND11_MODULE(_agentd, m) {
  using namespace agentd;
  using namespace agentd::python;
  m.doc() = "agentd: drive agentd agent servers from Python (the C++ client underneath).";
  m.attr("__version__") = agentd::version();

  m.def("_set_default_server_path", [](std::string p) { default_server_path() = std::move(p); });

  // agentd.Error: a RuntimeError carrying the C++ error's fields.
  py::dict scope;
  scope["__name__"] = "agentd";
  py::exec(R"(
class Error(RuntimeError):
    """An agentd failure, local or remote: code ("unknown_agent", "agent_failed", "timeout", ...),
    the agent's id and class when one is involved, and whether retrying may succeed."""

    def __init__(self, message, code="internal", agent_id="", agent_class="", retryable=False):
        super().__init__(message)
        self.message = message
        self.code = code
        self.agent_id = agent_id
        self.agent_class = agent_class
        self.retryable = retryable
)",
           scope);
  error_type() = scope["Error"];
  m.attr("Error") = error_type();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const agentd::Error& e) {
      py::object err = error_type()(std::string(e.what()), std::string(to_string(e.code())),
                                    e.agent_id(), e.agent_class(), e.retryable());
      PyErr_SetObject(error_type().ptr(), err.ptr());
    }
  });

  py::class_<Msg>(m, "Msg", "A message between agents (AgentScope's Msg).")
      .def(py::init([](std::string name, const py::object& content, std::string role,
                       const py::object& metadata, std::vector<std::string> url,
                       std::optional<std::string> id) {
             Msg msg(std::move(name), to_value(content), std::move(role));
             msg.metadata = to_value(metadata);
             msg.url = std::move(url);
             if (id) msg.id = *id;
             return msg;
           }),
           py::arg("name"), py::arg("content") = py::none(), py::arg("role") = "assistant",
           py::arg("metadata") = py::none(), py::arg("url") = std::vector<std::string>{},
           py::arg("id") = py::none())
      .def_readwrite("id", &Msg::id)
      .def_readwrite("name", &Msg::name)
      .def_readwrite("role", &Msg::role)
      .def_property(
          "content", [](const Msg& x) { return from_value(x.content); },
          [](Msg& x, const py::object& v) { x.content = to_value(v); })
      .def_property(
          "metadata", [](const Msg& x) { return from_value(x.metadata); },
          [](Msg& x, const py::object& v) { x.metadata = to_value(v); })
      .def_readwrite("url", &Msg::url)
      .def_readwrite("timestamp", &Msg::timestamp)
      .def("text", &Msg::text, "content as text: the string itself, or the JSON of any other value")
      .def("to_dict", [](const Msg& x) { return from_value(to_json(x)); })
      .def_static("from_dict", [](const py::object& d) { return msg_from_json(to_value(d)); })
      .def("__eq__", [](const Msg& a, const py::object& b) {
        return py::isinstance<Msg>(b) && a == b.cast<const Msg&>();
      })
      .def("__repr__", &repr_msg);

  py::class_<AgentInfo>(m, "AgentInfo")
      .def_readonly("id", &AgentInfo::id)
      .def_readonly("name", &AgentInfo::name)
      .def_readonly("class_name", &AgentInfo::class_name)
      .def_readonly("queued_calls", &AgentInfo::queued_calls)
      .def_readonly("completed_calls", &AgentInfo::completed_calls)
      .def_readonly("failed_calls", &AgentInfo::failed_calls)
      .def("__repr__", [](const AgentInfo& i) {
        return "AgentInfo(id='" + i.id + "', name='" + i.name + "', class_name='" + i.class_name + "')";
      });

  py::class_<ServerInfo>(m, "ServerInfo")
      .def_readonly("server_id", &ServerInfo::server_id)
      .def_readonly("version", &ServerInfo::version)
      .def_readonly("pid", &ServerInfo::pid)
      .def_readonly("uptime_seconds", &ServerInfo::uptime_seconds)
      .def_readonly("rss_bytes", &ServerInfo::rss_bytes)
      .def_readonly("cpu_seconds", &ServerInfo::cpu_seconds)
      .def_readonly("agent_count", &ServerInfo::agent_count)
      .def_readonly("pool_size", &ServerInfo::pool_size)
      .def_readonly("advertise_address", &ServerInfo::advertise_address)
      .def_readonly("classes", &ServerInfo::classes)
      .def_readonly("model_configs", &ServerInfo::model_configs)
      .def_readonly("workers", &ServerInfo::workers)
      .def_readonly("calls_completed", &ServerInfo::calls_completed)
      .def_readonly("calls_failed", &ServerInfo::calls_failed)
      .def_readonly("calls_queued", &ServerInfo::calls_queued)
      .def_readonly("max_pool_size", &ServerInfo::max_pool_size)
      .def_readonly("max_expire_seconds", &ServerInfo::max_expire_seconds)
      .def_readonly("state_dir", &ServerInfo::state_dir)
      .def_readonly("state_bytes", &ServerInfo::state_bytes)
      .def_readonly("state_last_commit_unix_ms", &ServerInfo::state_last_commit_unix_ms)
      .def_readonly("state_error", &ServerInfo::state_error)
      .def_readonly("workers_busy", &ServerInfo::workers_busy)
      .def_readonly("workers_max", &ServerInfo::workers_max)
      .def_readonly("calls_slow", &ServerInfo::calls_slow)
      .def_readonly("calls_slow_total", &ServerInfo::calls_slow_total)
      .def_readonly("calls_timed_out", &ServerInfo::calls_timed_out)
      .def("__repr__", [](const ServerInfo& i) {
        return "ServerInfo(server_id='" + i.server_id + "', version='" + i.version +
               "', agent_count=" + std::to_string(i.agent_count) + ")";
      });

  py::class_<PyPlaceholder>(m, "Placeholder",
                            "The future result of an agent call; pass it on without waiting, or "
                            "read it (get(), .content, .name, ... wait until it is ready).")
      .def("get", &PyPlaceholder::get, py::arg("timeout") = py::none(),
           py::return_value_policy::copy)
      .def_property_readonly("call_id",
                             [](const PyPlaceholder& p) { return p.placeholder().call_id(); })
      .def_property_readonly("origin",
                             [](const PyPlaceholder& p) { return p.placeholder().origin(); })
      .def_property_readonly("content",
                             [](PyPlaceholder& p) { return from_value(p.get(std::nullopt).content); })
      .def_property_readonly("metadata",
                             [](PyPlaceholder& p) { return from_value(p.get(std::nullopt).metadata); })
      .def_property_readonly("name", [](PyPlaceholder& p) { return p.get(std::nullopt).name; })
      .def_property_readonly("role", [](PyPlaceholder& p) { return p.get(std::nullopt).role; })
      .def_property_readonly("id", [](PyPlaceholder& p) { return p.get(std::nullopt).id; })
      .def_property_readonly("url", [](PyPlaceholder& p) { return p.get(std::nullopt).url; })
      .def_property_readonly("timestamp",
                             [](PyPlaceholder& p) { return p.get(std::nullopt).timestamp; })
      .def("text", [](PyPlaceholder& p) { return p.get(std::nullopt).text(); })
      .def("next_chunk", &PyPlaceholder::next_chunk, py::arg("timeout") = py::none(),
           "The next chunk of a streamed reply (AgentRef.reply_stream) as str, waiting for it; "
           "None once the reply is complete. Raises the call's agentd.Error after the chunks "
           "sent before a failure.")
      .def(
          "chunks",
          [](py::object self) {
            // iter(self.next_chunk, None): the bound method keeps the placeholder alive.
            return py::module_::import("builtins").attr("iter")(self.attr("next_chunk"), py::none());
          },
          "An iterator over the chunks of a streamed reply, in order (see next_chunk).")
      .def("__repr__", [](const PyPlaceholder& p) {
        return "Placeholder(call_id='" + p.placeholder().call_id() + "')";
      });

  py::class_<PyAgentRef>(m, "AgentRef", "A handle on one agent on one server.")
      .def_property_readonly("id", [](const PyAgentRef& a) { return a.ref().id(); })
      .def_property_readonly("name", [](const PyAgentRef& a) { return a.ref().name(); })
      .def_property_readonly("class_name", [](const PyAgentRef& a) { return a.ref().class_name(); })
      .def("reply", &PyAgentRef::reply, py::arg("x") = py::none())
      .def("__call__", &PyAgentRef::reply, py::arg("x") = py::none())
      .def("reply_stream", &PyAgentRef::reply_stream, py::arg("x"),
           "reply(), streamed: the agent's chunks reach the Placeholder as they are made "
           "(p.chunks(), p.next_chunk()); get() still returns the whole message.")
      .def("observe", &PyAgentRef::observe, py::arg("x"))
      .def("call", &PyAgentRef::call, py::arg("method"), py::arg("args") = py::none())
      .def("call_async", &PyAgentRef::call_async, py::arg("method"), py::arg("args") = py::none())
      .def("memory", &PyAgentRef::memory)
      .def("info", &PyAgentRef::info)
      .def("to_value", [](const PyAgentRef& a) { return from_value(a.ref().to_value()); })
      .def("__eq__", [](const PyAgentRef& a, const py::object& b) {
        return py::isinstance<PyAgentRef>(b) &&
               a.ref().to_value() == b.cast<const PyAgentRef&>().ref().to_value();
      })
      .def("__hash__", [](const PyAgentRef& a) { return py::hash(py::str(a.ref().id())); })
      .def("__repr__", [](const PyAgentRef& a) {
        return "AgentRef(id='" + a.ref().id() + "', name='" + a.ref().name() + "', class_name='" +
               a.ref().class_name() + "')";
      });

  py::class_<PyClient>(m, "Client",
                       "A connection to agents: Client.connect (independent mode), "
                       "Client.spawn_child (child mode) or Client.local (in this process).")
      .def_static(
          "connect",
          [](const std::string& host, std::uint16_t port, double timeout, double connect_timeout,
             std::string token, std::string tls_ca, std::string tls_cert, std::string tls_key,
             double reconnect_initial, double reconnect_max, double reconnect_deadline) {
            ClientOptions o{.timeout = to_millis(timeout),
                            .connect_timeout = to_millis(connect_timeout),
                            .token = std::move(token),
                            .tls_ca = std::move(tls_ca),
                            .tls_cert = std::move(tls_cert),
                            .tls_key = std::move(tls_key)};
            // Seconds, like the timeouts; reconnect_deadline 0: never reconnect.
            o.reconnect_initial = to_millis(reconnect_initial);
            o.reconnect_max = to_millis(reconnect_max);
            o.reconnect_deadline = to_millis(reconnect_deadline);
            std::optional<Client> c;
            {
              py::gil_scoped_release release;
              c.emplace(Client::connect(host, port, o));
            }
            return std::make_unique<PyClient>(std::move(*c), false, o.timeout);
          },
          py::arg("host"), py::arg("port"), py::arg("timeout") = 1800.0,
          py::arg("connect_timeout") = 10.0, py::arg("token") = "", py::arg("tls_ca") = "",
          py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("reconnect_initial") = 0.1,
          py::arg("reconnect_max") = 5.0, py::arg("reconnect_deadline") = 60.0)
      .def_static(
          "spawn_child",
          [](std::vector<std::string> plugins, std::vector<std::string> plugin_dirs,
             std::string model_config_path, std::string server_path,
             std::vector<std::string> extra_args, double start_timeout, double timeout,
             std::string token) {
            if (server_path.empty() && std::getenv("AGENTD_AS_SERVER") == nullptr)
              server_path = default_server_path();
            ChildOptions o{.plugins = std::move(plugins),
                           .plugin_dirs = std::move(plugin_dirs),
                           .model_config_path = std::move(model_config_path),
                           .server_path = std::move(server_path),
                           .extra_args = std::move(extra_args),
                           .start_timeout = to_millis(start_timeout),
                           .client = {.timeout = to_millis(timeout), .token = std::move(token)}};
            Millis t = o.client.timeout;
            std::optional<Client> c;
            {
              py::gil_scoped_release release;
              c.emplace(Client::spawn_child(std::move(o)));
            }
            return std::make_unique<PyClient>(std::move(*c), true, t);
          },
          py::arg("plugins") = std::vector<std::string>{},
          py::arg("plugin_dirs") = std::vector<std::string>{}, py::arg("model_config_path") = "",
          py::arg("server_path") = "", py::arg("extra_args") = std::vector<std::string>{},
          py::arg("start_timeout") = 30.0, py::arg("timeout") = 1800.0, py::arg("token") = "")
      .def_static(
          "local",
          [](std::vector<std::string> plugins, std::vector<std::string> plugin_dirs,
             std::string model_config_path, std::size_t max_workers, double timeout) {
            LocalOptions o{.plugins = std::move(plugins),
                           .plugin_dirs = std::move(plugin_dirs),
                           .model_config_path = std::move(model_config_path),
                           .classes = {},
                           .max_workers = max_workers,
                           .client = {.timeout = to_millis(timeout)}};
            Millis t = o.client.timeout;
            std::optional<Client> c;
            {
              py::gil_scoped_release release;
              c.emplace(Client::local(std::move(o)));
            }
            return std::make_unique<PyClient>(std::move(*c), false, t);
          },
          py::arg("plugins") = std::vector<std::string>{},
          py::arg("plugin_dirs") = std::vector<std::string>{}, py::arg("model_config_path") = "",
          py::arg("max_workers") = 1024, py::arg("timeout") = 1800.0)
      .def(
          "create_agent",
          [](PyClient& self, const std::string& cls, std::optional<std::string> name,
             const py::object& args, std::optional<std::string> id) {
            Value a = args_value(args);
            return self.wrap(released(self, [&](Client& c) {
              return c.create_agent(cls, name.value_or(""), a, id.value_or(""));
            }));
          },
          py::arg("cls"), py::arg("name") = py::none(), py::arg("args") = py::none(),
          py::arg("id") = py::none())
      .def(
          "create_agents",
          [](PyClient& self, const std::string& cls, std::size_t count, const py::object& args,
             const std::string& name_prefix) {
            Value a = args_value(args);
            auto refs = released(
                self, [&](Client& c) { return c.create_agents(cls, count, a, name_prefix); });
            std::vector<PyAgentRef> out;
            out.reserve(refs.size());
            for (auto& r : refs) out.push_back(self.wrap(std::move(r)));
            return out;
          },
          py::arg("cls"), py::arg("count"), py::arg("args") = py::none(),
          py::arg("name_prefix") = "")
      .def(
          "agent",
          [](PyClient& self, const std::string& id) {
            return self.wrap(released(self, [&](Client& c) { return c.agent(id); }));
          },
          py::arg("id"))
      .def(
          "clone_agent",
          [](PyClient& self, const std::string& source_id, std::optional<std::string> name,
             std::optional<std::string> id) {
            return self.wrap(released(self, [&](Client& c) {
              return c.clone_agent(source_id, name.value_or(""), id.value_or(""));
            }));
          },
          py::arg("source_id"), py::arg("name") = py::none(), py::arg("id") = py::none(),
          "A copy of an agent: same class and args, a copy of its memory and saved state.")
      .def("list_agents",
           [](PyClient& self) { return released(self, [](Client& c) { return c.list_agents(); }); })
      .def(
          "delete_agent",
          [](PyClient& self, const std::string& id) {
            released(self, [&](Client& c) { c.delete_agent(id); return 0; });
          },
          py::arg("id"))
      .def("delete_all_agents", [](PyClient& self) {
        return released(self, [](Client& c) { return c.delete_all_agents(); });
      })
      .def("info", [](PyClient& self) { return released(self, [](Client& c) { return c.info(); }); })
      .def("ping", [](PyClient& self) { released(self, [](Client& c) { c.ping(); return 0; }); })
      .def("stop", [](PyClient& self) { released(self, [](Client& c) { c.stop(); return 0; }); })
      .def(
          "set_model_configs",
          [](PyClient& self, const std::string& text) {
            return released(self, [&](Client& c) { return c.set_model_configs(text); });
          },
          py::arg("text"))
      .def("close", &PyClient::close)
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly("address", [](PyClient& self) { return self.get()->address(); })
      .def_property_readonly("server_id", [](PyClient& self) { return self.get()->server_id(); })
      .def_property_readonly("port", [](PyClient& self) { return self.get()->port(); })
      .def_property_readonly("timeout", [](PyClient& self) {
        return std::chrono::duration<double>(self.timeout()).count();
      })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& self, const py::args&) {
        self.close();
        return false;
      })
      .def("__repr__", [](PyClient& self) {
        return self.closed() ? std::string("Client(closed)")
                             : "Client(address='" + self.get()->address() + "')";
      });

  py::class_<PyCluster>(m, "Cluster",
                        "One client over several servers: Cluster.open(spec) (a cluster file, "
                        "'dns:NAME:PORT' or 'HOST:PORT,HOST:PORT'), Cluster.connect(addresses) or "
                        "Cluster.spawn_children(n). Agents are placed by the policy "
                        "('round_robin' or 'least_loaded') or on a named member.")
      .def_static(
          "open",
          [](const std::string& spec, std::string placement, double timeout,
             double connect_timeout, std::string token, std::string tls_ca, std::string tls_cert,
             std::string tls_key) {
            ClusterOptions o;
            o.placement = placement_named(placement);
            o.client = {.timeout = to_millis(timeout),
                        .connect_timeout = to_millis(connect_timeout),
                        .token = std::move(token),
                        .tls_ca = std::move(tls_ca),
                        .tls_cert = std::move(tls_cert),
                        .tls_key = std::move(tls_key)};
            Millis t = o.client.timeout;
            std::optional<Cluster> c;
            {
              py::gil_scoped_release release;
              c.emplace(Cluster::open(spec, o));
            }
            return std::make_unique<PyCluster>(std::move(*c), false, t);
          },
          py::arg("spec"), py::arg("placement") = "round_robin", py::arg("timeout") = 1800.0,
          py::arg("connect_timeout") = 10.0, py::arg("token") = "", py::arg("tls_ca") = "",
          py::arg("tls_cert") = "", py::arg("tls_key") = "")
      .def_static(
          "spawn_children",
          [](std::size_t n, std::vector<std::string> plugins, std::vector<std::string> plugin_dirs,
             std::string model_config_path, std::string server_path,
             std::vector<std::string> extra_args, std::string placement, double start_timeout,
             double timeout, std::string token) {
            if (server_path.empty() && std::getenv("AGENTD_AS_SERVER") == nullptr)
              server_path = default_server_path();
            ChildOptions o{.plugins = std::move(plugins),
                           .plugin_dirs = std::move(plugin_dirs),
                           .model_config_path = std::move(model_config_path),
                           .server_path = std::move(server_path),
                           .extra_args = std::move(extra_args),
                           .start_timeout = to_millis(start_timeout),
                           .client = {.timeout = to_millis(timeout), .token = std::move(token)}};
            ClusterOptions co;
            co.placement = placement_named(placement);
            co.client = o.client;
            std::optional<Cluster> c;
            {
              py::gil_scoped_release release;
              c.emplace(Cluster::spawn_children(n, std::move(o), co));
            }
            return std::make_unique<PyCluster>(std::move(*c), true, co.client.timeout);
          },
          py::arg("n"), py::arg("plugins") = std::vector<std::string>{},
          py::arg("plugin_dirs") = std::vector<std::string>{}, py::arg("model_config_path") = "",
          py::arg("server_path") = "", py::arg("extra_args") = std::vector<std::string>{},
          py::arg("placement") = "round_robin", py::arg("start_timeout") = 30.0,
          py::arg("timeout") = 1800.0, py::arg("token") = "")
      .def(
          "create_agent",
          [](PyCluster& self, const std::string& cls, std::optional<std::string> name,
             const py::object& args, std::optional<std::string> id) {
            Value a = args_value(args);
            return self.wrap(released(self, [&](Cluster& c) {
              return c.create_agent(cls, name.value_or(""), a, id.value_or(""));
            }));
          },
          py::arg("cls"), py::arg("name") = py::none(), py::arg("args") = py::none(),
          py::arg("id") = py::none())
      .def(
          "create_agent_on",
          [](PyCluster& self, const py::object& server, const std::string& cls,
             std::optional<std::string> name, const py::object& args,
             std::optional<std::string> id) {
            std::string member = py::str(server);  // an index or an address
            Value a = args_value(args);
            return self.wrap(released(self, [&](Cluster& c) {
              return c.create_agent_on(member, cls, name.value_or(""), a, id.value_or(""));
            }));
          },
          py::arg("server"), py::arg("cls"), py::arg("name") = py::none(),
          py::arg("args") = py::none(), py::arg("id") = py::none(),
          "Creates the agent on one member: its index (0, 1, ...) or its address.")
      .def(
          "create_agents",
          [](PyCluster& self, const std::string& cls, std::size_t count, const py::object& args,
             const std::string& name_prefix) {
            Value a = args_value(args);
            return self.wrap_all(released(
                self, [&](Cluster& c) { return c.create_agents(cls, count, a, name_prefix); }));
          },
          py::arg("cls"), py::arg("count"), py::arg("args") = py::none(),
          py::arg("name_prefix") = "",
          "count agents spread over the members up, created on all of them at once.")
      .def(
          "agent",
          [](PyCluster& self, const std::string& id) {
            return self.wrap(released(self, [&](Cluster& c) { return c.agent(id); }));
          },
          py::arg("id"))
      .def("delete_all_agents",
           [](PyCluster& self) { return released(self, [](Cluster& c) { return c.delete_all_agents(); }); })
      .def("members",
           [](PyCluster& self) {
             py::list out;
             for (const auto& m : self.get()->members())
               out.append(py::dict(py::arg("address") = m.address, py::arg("source") = m.source,
                                   py::arg("up") = m.up, py::arg("error") = m.error));
             return out;
           },
           "Each member as a dict: address, source (what named it), up, error (why it is down).")
      .def("refresh", [](PyCluster& self) { return released(self, [](Cluster& c) { return c.refresh(); }); },
           "Resolves DNS names again and reconnects members that are down; returns the members up.")
      .def(
          "info",
          [](PyCluster& self, std::size_t i) {
            return released(self, [&](Cluster& c) { return c.info(i); });
          },
          py::arg("i"), "Member i's ServerInfo, or None when it is down.")
      .def("__len__", [](PyCluster& self) { return self.get()->size(); })
      .def("close", &PyCluster::close)
      .def_property_readonly("closed", &PyCluster::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyCluster& self, const py::args&) {
        self.close();
        return false;
      })
      .def("__repr__", [](PyCluster& self) {
        return self.closed() ? std::string("Cluster(closed)")
                             : "Cluster(" + std::to_string(self.get()->size()) + " members)";
      });

  for (const char* name : {"Msg", "AgentInfo", "ServerInfo", "Placeholder", "AgentRef", "Client", "Cluster"})
    m.attr(name).attr("__module__") = "agentd";
}
