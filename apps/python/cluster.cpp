#include "cluster.h"

#include "client.h"  // connect_options, child_options
#include "shared_methods.h"

#include <cstddef>
#include <optional>
#include <utility>

namespace agentd::python {

namespace {

Placement placement_named(const std::string& name) {
  if (name == "round_robin") return Placement::round_robin;
  if (name == "least_loaded") return Placement::least_loaded;
  throw Error(ErrorCode::bad_args,
              "agentd: placement must be 'round_robin' or 'least_loaded', not '" + name + "'");
}

}  // namespace

PyAgentRef PyCluster::wrap(AgentRef r) {
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

std::vector<PyAgentRef> PyCluster::wrap_all(std::vector<AgentRef> refs) {
  std::vector<PyAgentRef> out;
  out.reserve(refs.size());
  for (auto& r : refs) out.push_back(wrap(std::move(r)));
  return out;
}

void PyCluster::close() {
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

void bind_cluster(py::module_& m) {
  py::class_<PyCluster> cluster(m, "Cluster",
                                "One client over several servers: Cluster.open(spec) (a cluster file, "
                                "'dns:NAME:PORT' or 'HOST:PORT,HOST:PORT'), Cluster.connect(addresses) or "
                                "Cluster.spawn_children(n). Agents are placed by the policy "
                                "('round_robin' or 'least_loaded') or on a named member.");
  cluster
      .def_static(
          "open",
          [](const std::string& spec, std::string placement, double timeout, double connect_timeout,
             std::string token, std::string tls_ca, std::string tls_cert, std::string tls_key) {
            ClusterOptions o;
            o.placement = placement_named(placement);
            o.client = connect_options(timeout, connect_timeout, std::move(token), std::move(tls_ca),
                                       std::move(tls_cert), std::move(tls_key));
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
             std::string model_config_path, std::string server_path, std::vector<std::string> extra_args,
             std::string placement, double start_timeout, double timeout, std::string token,
             std::vector<std::string> agent_dirs) {
            ChildOptions o = child_options(std::move(plugins), std::move(plugin_dirs), std::move(agent_dirs),
                                           std::move(model_config_path), std::move(server_path),
                                           std::move(extra_args), start_timeout, timeout, std::move(token));
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
          py::arg("placement") = "round_robin", py::arg("start_timeout") = 30.0, py::arg("timeout") = 1800.0,
          py::arg("token") = "", py::arg("agent_dirs") = std::vector<std::string>{});
  bind_shared_methods<PyCluster, Cluster>(
      cluster, "count agents spread over the members up, created on all of them at once.");
  cluster
      .def(
          "create_agent_on",
          [](PyCluster& self, const py::object& server, const std::string& cls,
             std::optional<std::string> name, const py::object& args, std::optional<std::string> id) {
            std::string member = py::str(server);  // an index or an address
            Value a = args_value(args);
            return self.wrap(released(self, [&](Cluster& c) {
              return c.create_agent_on(member, cls, name.value_or(""), a, id.value_or(""));
            }));
          },
          py::arg("server"), py::arg("cls"), py::arg("name") = py::none(), py::arg("args") = py::none(),
          py::arg("id") = py::none(),
          "Creates the agent on one member: its index (0, 1, ...) or its address.")
      .def(
          "members",
          [](PyCluster& self) {
            py::list out;
            for (const auto& m : self.get()->members())
              out.append(py::dict(py::arg("address") = m.address, py::arg("source") = m.source,
                                  py::arg("up") = m.up, py::arg("error") = m.error));
            return out;
          },
          "Each member as a dict: address, source (what named it), up, error (why it is down).")
      .def(
          "refresh", [](PyCluster& self) { return released(self, [](Cluster& c) { return c.refresh(); }); },
          "Resolves DNS names again and reconnects members that are down; returns the members up.")
      .def(
          "info",
          [](PyCluster& self, std::size_t i) {
            return released(self, [&](Cluster& c) { return c.info(i); });
          },
          py::arg("i"), "Member i's ServerInfo, or None when it is down.")
      .def("__len__", [](PyCluster& self) { return self.get()->size(); })
      .def("__repr__", [](PyCluster& self) {
        return self.closed() ? std::string("Cluster(closed)")
                             : "Cluster(" + std::to_string(self.get()->size()) + " members)";
      });
}

}  // namespace agentd::python
