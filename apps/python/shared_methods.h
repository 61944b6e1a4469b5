// The methods agentd.Client and agentd.Cluster bind alike, written once.
#pragma once

#include "values.h"

#include <pybind11/pybind11.h>

#include <cstddef>
#include <optional>
#include <string>

namespace agentd::python {

namespace py = pybind11;

// Binds create_agent, create_agents, agent, delete_all_agents, close, closed and the context
// manager on py_class. Py is the wrapper (PyClient or PyCluster: wrap, wrap_all, close, closed,
// and a released(self, f) that runs f on the C++ object with the GIL released), Target the C++
// object (Client or Cluster). create_agents_doc: its docstring ("" for none).
template <typename Py, typename Target>
void bind_shared_methods(py::class_<Py>& py_class, const char* create_agents_doc) {
  py_class
      .def(
          "create_agent",
          [](Py& self, const std::string& cls, std::optional<std::string> name, const py::object& args,
             std::optional<std::string> id) {
            Value a = args_value(args);
            return self.wrap(released(
                self, [&](Target& c) { return c.create_agent(cls, name.value_or(""), a, id.value_or("")); }));
          },
          py::arg("cls"), py::arg("name") = py::none(), py::arg("args") = py::none(),
          py::arg("id") = py::none())
      .def(
          "create_agents",
          [](Py& self, const std::string& cls, std::size_t count, const py::object& args,
             const std::string& name_prefix) {
            Value a = args_value(args);
            return self.wrap_all(
                released(self, [&](Target& c) { return c.create_agents(cls, count, a, name_prefix); }));
          },
          py::arg("cls"), py::arg("count"), py::arg("args") = py::none(), py::arg("name_prefix") = "",
          create_agents_doc)
      .def(
          "agent",
          [](Py& self, const std::string& id) {
            return self.wrap(released(self, [&](Target& c) { return c.agent(id); }));
          },
          py::arg("id"))
      .def("delete_all_agents",
           [](Py& self) { return released(self, [](Target& c) { return c.delete_all_agents(); }); })
      .def("close", &Py::close)
      .def_property_readonly("closed", &Py::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Py& self, const py::args&) {
        self.close();
        return false;
      });
}

}  // namespace agentd::python
