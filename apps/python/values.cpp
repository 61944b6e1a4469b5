#include "values.h"

#include <agentd/msg.h>
#include <agentd/value_limits.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace agentd::python {

Millis to_millis(double seconds) {
  if (!(seconds >= 0)) throw py::value_error("a timeout must be a number of seconds >= 0");
  return Millis(static_cast<std::int64_t>(std::llround(std::min(seconds, 1e12) * 1000)));
}

Value to_value(const py::handle& o, int depth) {
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
    case Value::value_t::null:
      return py::none();
    case Value::value_t::boolean:
      return py::bool_(v.get<bool>());
    case Value::value_t::number_integer:
      return py::int_(v.get<std::int64_t>());
    case Value::value_t::number_unsigned:
      return py::int_(v.get<std::uint64_t>());
    case Value::value_t::number_float:
      return py::float_(v.get<double>());
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
    case Value::value_t::discarded:
      break;
  }
  return py::none();
}

Value args_value(const py::object& o) { return o.is_none() ? Value::object() : to_value(o); }

}  // namespace agentd::python
