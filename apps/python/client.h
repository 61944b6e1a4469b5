// agentd.Client: one connection to agents (independent mode, child mode or in this process), and
// the options Client and Cluster build alike from their keyword arguments.
#pragma once

#include "agent_ref.h"
#include "values.h"

#include <agentd/client.h>

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentd::python {

namespace py = pybind11;

// The as_server child mode uses when neither server_path nor $AGENTD_AS_SERVER names one (set by
// the package's __init__ in a build tree: build/bin/as_server). Only touched with the GIL held.
std::string& default_server_path();

// Client.connect's and Cluster.open's options (timeouts in seconds).
ClientOptions connect_options(double timeout, double connect_timeout, std::string token, std::string tls_ca,
                              std::string tls_cert, std::string tls_key);

// Client.spawn_child's and Cluster.spawn_children's options (timeouts in seconds); an empty
// server_path is default_server_path() unless $AGENTD_AS_SERVER is set.
ChildOptions child_options(std::vector<std::string> plugins, std::vector<std::string> plugin_dirs,
                           std::vector<std::string> agent_dirs, std::string model_config_path,
                           std::string server_path, std::vector<std::string> extra_args, double start_timeout,
                           double timeout, std::string token);

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
  void close();
  bool closed() {
    std::lock_guard lock(box_->mu);
    return !box_->client;
  }

  PyAgentRef wrap(AgentRef r) const { return PyAgentRef(std::move(r), box_); }
  std::vector<PyAgentRef> wrap_all(std::vector<AgentRef> refs) const;
  std::shared_ptr<Client> get() const { return box_->get(); }
  Millis timeout() const { return box_->timeout; }

 private:
  std::shared_ptr<ClientBox> box_;
};

// Runs f(client) with the GIL released.
template <typename F>
auto released(const PyClient& self, F&& f) {
  auto c = self.get();
  py::gil_scoped_release release;
  return f(*c);
}

// Defines agentd.Client in m (after agentd.AgentRef).
void bind_client(py::module_& m);

}  // namespace agentd::python
