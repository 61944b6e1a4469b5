// agentd::Error -> agentd.Error (a RuntimeError with code, agent_id, agent_class, retryable).
#pragma once

#include <agentd/error.h>

#include <pybind11/pybind11.h>

namespace agentd::python {

namespace py = pybind11;

// agentd.Error, the Python class (set by bind_errors).
py::object& error_type();

// Defines agentd.Error in m and translates every agentd::Error a binding throws into it. Call
// once, at import, before anything that may throw one.
void bind_errors(py::module_& m);

// An agentd.Error instance carrying e's fields (GIL held).
py::object to_python(const Error& e);

}  // namespace agentd::python
