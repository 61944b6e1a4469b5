// agentd.Cluster: one client over several servers, its refs behaving as a Client's do.
#pragma once

#include "agent_ref.h"
#include "values.h"

#include <agentd/client.h>
#include <agentd/cluster.h>

#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace agentd::python {

namespace py = pybind11;

// agentd.Cluster: one client over several servers. Each member's Client gets its own ClientBox
// (an aliasing pointer into the shared Cluster), so the refs it makes behave as a Client's do;
// close() drops them all (and stops the children of spawn_children).
class PyCluster {
 public:
  PyCluster(Cluster c, bool children, Millis timeout)
      : cluster_(std::make_shared<Cluster>(std::move(c))), children_(children), timeout_(timeout) {}
  ~PyCluster() {
    try {
      close();
    } catch (...) {
    }
  }

  std::shared_ptr<Cluster> get() const {
    std::lock_guard lock(mu_);
    if (!cluster_) throw Error(ErrorCode::disconnected, "the agentd cluster is closed");
    return cluster_;
  }
  // The ref with the box of the member whose client made it.
  PyAgentRef wrap(AgentRef r);
  std::vector<PyAgentRef> wrap_all(std::vector<AgentRef> refs);
  void close();
  bool closed() const {
    std::lock_guard lock(mu_);
    return !cluster_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Cluster> cluster_;
  std::map<std::string, std::shared_ptr<ClientBox>> boxes_;  // by the member client's address
  bool children_ = false;
  Millis timeout_{};
};

// Runs f(cluster) with the GIL released.
template <typename F>
auto released(const PyCluster& self, F&& f) {
  auto c = self.get();
  py::gil_scoped_release release;
  return f(*c);
}

// Defines agentd.Cluster in m (after agentd.Client).
void bind_cluster(py::module_& m);

}  // namespace agentd::python
