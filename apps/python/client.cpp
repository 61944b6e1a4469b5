#include "client.h"

#include "shared_methods.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace agentd::python {

namespace {

// close() runs from __exit__ (GIL held) and from the destructor (maybe during interpreter
// shutdown, GIL held too): release it while the child stops.
std::optional<py::gil_scoped_release> maybe_release_gil() {
  std::optional<py::gil_scoped_release> r;
  if (Py_IsInitialized() && PyGILState_Check()) r.emplace();
  return r;
}

// lanes=None (the default): lanes where they can be used; True: lanes, or bad_args where they
// cannot be; False: none (ClientOptions::lanes).
LaneUse lane_use(const std::optional<bool>& lanes) {
  if (!lanes) return LaneUse::automatic;
  return *lanes ? LaneUse::on : LaneUse::off;
}

// lane_spin=None (the default): ClientOptions::lane_spin's default; else seconds.
void set_lane_spin(ClientOptions& o, const std::optional<double>& lane_spin) {
  if (lane_spin) o.lane_spin = std::chrono::microseconds(std::llround(*lane_spin * 1e6));
}

}  // namespace

std::string& default_server_path() {
  static std::string path;
  return path;
}

ClientOptions connect_options(double timeout, double connect_timeout, std::string token, std::string tls_ca,
                              std::string tls_cert, std::string tls_key) {
  return {.timeout = to_millis(timeout),
          .connect_timeout = to_millis(connect_timeout),
          .token = std::move(token),
          .tls_ca = std::move(tls_ca),
          .tls_cert = std::move(tls_cert),
          .tls_key = std::move(tls_key)};
}

ChildOptions child_options(std::vector<std::string> plugins, std::vector<std::string> plugin_dirs,
                           std::vector<std::string> agent_dirs, std::string model_config_path,
                           std::string server_path, std::vector<std::string> extra_args, double start_timeout,
                           double timeout, std::string token) {
  if (server_path.empty() && std::getenv("AGENTD_AS_SERVER") == nullptr) server_path = default_server_path();
  return {.plugins = std::move(plugins),
          .plugin_dirs = std::move(plugin_dirs),
          .agent_dirs = std::move(agent_dirs),
          .model_config_path = std::move(model_config_path),
          .server_path = std::move(server_path),
          .extra_args = std::move(extra_args),
          .start_timeout = to_millis(start_timeout),
          .client = {.timeout = to_millis(timeout), .token = std::move(token)}};
}

void PyClient::close() {
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

std::vector<PyAgentRef> PyClient::wrap_all(std::vector<AgentRef> refs) const {
  std::vector<PyAgentRef> out;
  out.reserve(refs.size());
  for (auto& r : refs) out.push_back(wrap(std::move(r)));
  return out;
}

void bind_client(py::module_& m) {
  py::class_<PyClient> client(m, "Client",
                              "A connection to agents: Client.connect (independent mode), "
                              "Client.spawn_child (child mode) or Client.local (in this process).");
  client
      .def_static(
          "connect",
          [](const std::string& host, std::uint16_t port, double timeout, double connect_timeout,
             std::string token, std::string tls_ca, std::string tls_cert, std::string tls_key,
             double reconnect_initial, double reconnect_max, double reconnect_deadline, bool single_thread,
             std::optional<bool> lanes, std::optional<double> lane_spin) {
            ClientOptions o = connect_options(timeout, connect_timeout, std::move(token), std::move(tls_ca),
                                              std::move(tls_cert), std::move(tls_key));
            // Seconds, like the timeouts; reconnect_deadline 0: never reconnect.
            o.reconnect_initial = to_millis(reconnect_initial);
            o.reconnect_max = to_millis(reconnect_max);
            o.reconnect_deadline = to_millis(reconnect_deadline);
            o.single_thread = single_thread;
            o.lanes = lane_use(lanes);
            set_lane_spin(o, lane_spin);
            std::optional<Client> c;
            {
              py::gil_scoped_release release;
              c.emplace(Client::connect(host, port, o));
            }
            return std::make_unique<PyClient>(std::move(*c), false, o.timeout);
          },
          py::arg("host"), py::arg("port"), py::arg("timeout") = 1800.0, py::arg("connect_timeout") = 10.0,
          py::arg("token") = "", py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "",
          py::arg("reconnect_initial") = 0.1, py::arg("reconnect_max") = 5.0,
          py::arg("reconnect_deadline") = 60.0, py::arg("single_thread") = false,
          py::arg("lanes") = py::none(), py::arg("lane_spin") = py::none())
      .def_static(
          "spawn_child",
          [](std::vector<std::string> plugins, std::vector<std::string> plugin_dirs,
             std::string model_config_path, std::string server_path, std::vector<std::string> extra_args,
             double start_timeout, double timeout, std::string token, std::vector<std::string> agent_dirs,
             bool single_thread, std::optional<bool> lanes, std::optional<double> lane_spin) {
            ChildOptions o = child_options(std::move(plugins), std::move(plugin_dirs), std::move(agent_dirs),
                                           std::move(model_config_path), std::move(server_path),
                                           std::move(extra_args), start_timeout, timeout, std::move(token));
            o.client.single_thread = single_thread;
            o.client.lanes = lane_use(lanes);
            set_lane_spin(o.client, lane_spin);
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
          py::arg("start_timeout") = 30.0, py::arg("timeout") = 1800.0, py::arg("token") = "",
          py::arg("agent_dirs") = std::vector<std::string>{}, py::arg("single_thread") = false,
          py::arg("lanes") = py::none(), py::arg("lane_spin") = py::none())
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
          py::arg("max_workers") = 1024, py::arg("timeout") = 1800.0);
  bind_shared_methods<PyClient, Client>(client, "");
  client
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
            released(self, [&](Client& c) {
              c.delete_agent(id);
              return 0;
            });
          },
          py::arg("id"))
      .def("info", [](PyClient& self) { return released(self, [](Client& c) { return c.info(); }); })
      .def("ping",
           [](PyClient& self) {
             released(self, [](Client& c) {
               c.ping();
               return 0;
             });
           })
      .def("stop",
           [](PyClient& self) {
             released(self, [](Client& c) {
               c.stop();
               return 0;
             });
           })
      .def(
          "set_model_configs",
          [](PyClient& self, const std::string& text) {
            return released(self, [&](Client& c) { return c.set_model_configs(text); });
          },
          py::arg("text"))
      .def_property_readonly("address", [](PyClient& self) { return self.get()->address(); })
      .def_property_readonly("server_id", [](PyClient& self) { return self.get()->server_id(); })
      .def_property_readonly("port", [](PyClient& self) { return self.get()->port(); })
      .def_property_readonly(
          "timeout", [](PyClient& self) { return std::chrono::duration<double>(self.timeout()).count(); })
      .def("__repr__", [](PyClient& self) {
        return self.closed() ? std::string("Client(closed)")
                             : "Client(address='" + self.get()->address() + "')";
      });
}

}  // namespace agentd::python
