#include "errors.h"

#include <agentd/error.h>

#include <pybind11/eval.h>

#include <exception>
#include <string>

namespace agentd::python {

py::object& error_type() {
  static py::object* type = nullptr;  // set once at import, owned by the module (never freed)
  if (type == nullptr) type = new py::object();
  return *type;
}

py::object to_python(const Error& e) {
  return error_type()(std::string(e.what()), std::string(to_string(e.code())), e.agent_id(), e.agent_class(),
                      e.retryable());
}

void bind_errors(py::module_& m) {
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
      py::object err = to_python(e);
      PyErr_SetObject(error_type().ptr(), err.ptr());
    }
  });
}

}  // namespace agentd::python
