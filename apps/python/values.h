// Python objects <-> agentd::Value (nlohmann::json), both ways without loss; seconds (Python's
// timeouts) -> milliseconds. Call with the GIL held.
#pragma once

#include <agentd/value.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every translation unit that binds: std::vector, std::optional, ...

#include <chrono>

namespace agentd::python {

namespace py = pybind11;

using Millis = std::chrono::milliseconds;

// Seconds (a float >= 0, else ValueError) as milliseconds.
Millis to_millis(double seconds);

// depth: how many lists and dicts o is inside. Deeper than kMaxValueDepth is refused (ValueError
// naming the limit) before recursing further, so a deep or self-containing object cannot
// overflow the stack.
Value to_value(const py::handle& o, int depth = 0);

py::object from_value(const Value& v);

// Agent or method arguments: None is an empty object.
Value args_value(const py::object& o);

}  // namespace agentd::python
