#include "agent_ref.h"

#include "hosted_agent.h"

#include <algorithm>
#include <utility>

namespace agentd::python {

using namespace std::chrono_literals;

namespace {

// How long one slice of a wait lasts: Ctrl-C is checked between slices.
constexpr Millis kSlice = 50ms;

// The timeout error of the last slice, saying the whole wait ("within 500 ms"), not the slice's.
Error whole_wait(const Error& e, Millis total) {
  std::string text = e.message();
  if (auto at = text.rfind(" within "); at != std::string::npos)
    text = text.substr(0, at) + " within " + std::to_string(total.count()) + " ms";
  return Error(e.code(), std::move(text), e.agent_id(), e.agent_class(), e.retryable());
}
bool is_chunk_wait_timeout(const Error& e) {
  return e.code() == ErrorCode::timeout && e.agent_class().empty() &&
         e.message().find("no chunk of call") != std::string::npos;
}
// The timeout get() throws when its own wait runs out (not a producer's error with code timeout,
// which names the agent's class).
bool is_wait_timeout(const Error& e) {
  return e.code() == ErrorCode::timeout && e.agent_class().empty() &&
         e.message().find("was not ready within") != std::string::npos;
}

}  // namespace

const Msg& PyPlaceholder::get(std::optional<double> timeout) {
  if (cached_) return *cached_;
  if (on_host_asyncio_thread()) {
    // Only a result that is there already: waiting here would stop the loop that may produce it.
    try {
      cached_ = std::make_shared<Msg>(p_.get(Millis(0)));
      return *cached_;
    } catch (const Error& e) {
      if (!is_wait_timeout(e)) throw;
    }
    throw Error(ErrorCode::bad_request,
                "Placeholder.get() (or reading .content) inside an async agent would block its asyncio "
                "loop: write `msg = await placeholder` instead");
  }
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

py::object PyPlaceholder::next_chunk(std::optional<double> timeout) {
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

template <typename F>
auto PyAgentRef::with_input(const py::object& x, const char* usage, F f) const
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

PyPlaceholder PyAgentRef::reply(const py::object& x) const {
  if (x.is_none()) {
    box_->check_open();
    py::gil_scoped_release release;
    return wrap(r_.reply());
  }
  return with_input(x, "reply takes a Msg, a Placeholder or None",
                    [this](const auto& in) { return wrap(r_.reply(in)); });
}

PyPlaceholder PyAgentRef::reply_stream(const py::object& x) const {
  return with_input(x, "reply_stream takes a Msg or a Placeholder",
                    [this](const auto& in) { return wrap(r_.reply_stream(in)); });
}

void PyAgentRef::observe(const py::object& x) const {
  with_input(x, "observe takes a Msg or a Placeholder", [this](const auto& in) { r_.observe(in); });
}

py::object PyAgentRef::call(const std::string& method, const py::object& args) const {
  box_->check_open();
  if (on_host_asyncio_thread())
    throw Error(ErrorCode::bad_request,
                "AgentRef.call() inside an async agent would block its asyncio loop: write "
                "`value = (await ref.call_async(method, args)).content` instead");
  Value a = args_value(args);
  Value out;
  {
    py::gil_scoped_release release;
    out = r_.call(method, a);
  }
  return from_value(out);
}

PyPlaceholder PyAgentRef::call_async(const std::string& method, const py::object& args) const {
  box_->check_open();
  Value a = args_value(args);
  py::gil_scoped_release release;
  return wrap(r_.call_async(method, a));
}

std::vector<Msg> PyAgentRef::memory() const {
  box_->check_open();
  py::gil_scoped_release release;
  return r_.memory();
}

AgentInfo PyAgentRef::info() const {
  box_->check_open();
  py::gil_scoped_release release;
  return r_.info();
}

void bind_agent_ref(py::module_& m) {
  py::class_<PyPlaceholder>(m, "Placeholder",
                            "The future result of an agent call; pass it on without waiting, or "
                            "read it (get(), .content, .name, ... wait until it is ready).")
      .def("get", &PyPlaceholder::get, py::arg("timeout") = py::none(), py::return_value_policy::copy)
      .def_property_readonly("call_id", [](const PyPlaceholder& p) { return p.placeholder().call_id(); })
      .def_property_readonly("origin", [](const PyPlaceholder& p) { return p.placeholder().origin(); })
      .def_property_readonly("content",
                             [](PyPlaceholder& p) { return from_value(p.get(std::nullopt).content); })
      .def_property_readonly("metadata",
                             [](PyPlaceholder& p) { return from_value(p.get(std::nullopt).metadata); })
      .def_property_readonly("name", [](PyPlaceholder& p) { return p.get(std::nullopt).name; })
      .def_property_readonly("role", [](PyPlaceholder& p) { return p.get(std::nullopt).role; })
      .def_property_readonly("id", [](PyPlaceholder& p) { return p.get(std::nullopt).id; })
      .def_property_readonly("url", [](PyPlaceholder& p) { return p.get(std::nullopt).url; })
      .def_property_readonly("timestamp", [](PyPlaceholder& p) { return p.get(std::nullopt).timestamp; })
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
      .def("__repr__",
           [](const PyPlaceholder& p) { return "Placeholder(call_id='" + p.placeholder().call_id() + "')"; });

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
      .def("__eq__",
           [](const PyAgentRef& a, const py::object& b) {
             return py::isinstance<PyAgentRef>(b) &&
                    a.ref().to_value() == b.cast<const PyAgentRef&>().ref().to_value();
           })
      .def("__hash__", [](const PyAgentRef& a) { return py::hash(py::str(a.ref().id())); })
      .def("__repr__", [](const PyAgentRef& a) {
        return "AgentRef(id='" + a.ref().id() + "', name='" + a.ref().name() + "', class_name='" +
               a.ref().class_name() + "')";
      });
}

}  // namespace agentd::python
