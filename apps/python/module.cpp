// The `agentd` Python module (its compiled part, agentd._agentd): the C++ client API in Python's
// idiom, built on the public headers only (agentd::client). This file defines the module and its
// plain data types (Msg, AgentInfo, ServerInfo); the rest is bound by
//   errors.cpp     agentd.Error and the translation of agentd::Error into it
//   agent_ref.cpp  agentd.Placeholder and agentd.AgentRef
//   client.cpp     agentd.Client
//   cluster.cpp    agentd.Cluster (shared_methods.h: the methods Client and Cluster bind alike)
//   values.cpp     Python objects <-> agentd::Value
//   completions.cpp  results from agentd's threads delivered to asyncio loops (`await placeholder`)
//   hosting.cpp, host_state.cpp, agent_context.cpp  agents written in Python, hosted by as_server
//                  (hosting.h); agentd/agent.py is their Python side (agentd.Agent, to_dist)
//
// Threads and the GIL: every call that may wait (on the network, a child server or a result)
// releases the GIL; Python values are converted to C++ before and back after, with it held.
#include "agent_ref.h"
#include "client.h"
#include "cluster.h"
#include "completions.h"
#include "errors.h"
#include "hosting.h"
#include "values.h"

#include <agentd/client.h>
#include <agentd/msg.h>
#include <agentd/version.h>

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentd::python {
namespace {

std::string repr_msg(const Msg& m) {
  return "Msg(name=" + std::string(py::repr(py::str(m.name))) +
         ", role=" + std::string(py::repr(py::str(m.role))) +
         ", content=" + std::string(py::repr(from_value(m.content))).substr(0, 80) + ")";
}

}  // namespace
}  // namespace agentd::python

PYBIND11_MODULE(_agentd, m) {
  using namespace agentd;
  using namespace agentd::python;
  m.doc() = "agentd: drive agentd agent servers from Python (the C++ client underneath).";
  m.attr("__version__") = agentd::version();

  m.def("_set_default_server_path", [](std::string p) { default_server_path() = std::move(p); });

  bind_errors(m);

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
      .def("__eq__", [](const Msg& a,
                        const py::object& b) { return py::isinstance<Msg>(b) && a == b.cast<const Msg&>(); })
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
      .def_readonly("lanes_open", &ServerInfo::lanes_open)
      .def_readonly("lane_threads", &ServerInfo::lane_threads)
      .def_readonly("lane_calls", &ServerInfo::lane_calls)
      .def("__repr__", [](const ServerInfo& i) {
        return "ServerInfo(server_id='" + i.server_id + "', version='" + i.version +
               "', agent_count=" + std::to_string(i.agent_count) + ")";
      });

  bind_agent_ref(m);
  bind_client(m);
  bind_cluster(m);
  bind_completions(m);
  bind_hosting(m);

  for (const char* name : {"Msg", "AgentInfo", "ServerInfo", "Placeholder", "AgentRef", "Client", "Cluster",
                           "Model", "ChatResponse", "ToolResult", "Tools"})
    m.attr(name).attr("__module__") = "agentd";
}
