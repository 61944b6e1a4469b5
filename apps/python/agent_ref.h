// What a Python Client or Cluster hands out: agentd.AgentRef and agentd.Placeholder, each holding
// the ClientBox of the client that made it.
//
// Threads and the GIL: every call that may wait (on the network or a result) releases the GIL;
// Python values are converted to C++ before and back after, with it held. Placeholder waits run
// in short slices and check for signals between them, so Ctrl-C interrupts a get() with
// KeyboardInterrupt.
#pragma once

#include "values.h"

#include <agentd/client.h>
#include <agentd/error.h>
#include <agentd/msg.h>

#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace agentd::python {

namespace py = pybind11;

// The C++ client behind a Python Client; close() drops it (stopping a child server). Objects it
// handed out keep working until then and fail with Error(disconnected) after.
struct ClientBox {
  std::shared_ptr<Client> client;
  bool child = false;
  // Refs a hosted agent reached with connect() (hosting.h): they use the server's own
  // connections, which stay open as long as the server runs.
  bool hosted = false;
  Millis timeout{};
  std::mutex mu;

  std::shared_ptr<Client> get() {
    std::lock_guard lock(mu);
    if (!client) throw Error(ErrorCode::disconnected, "the agentd client is closed");
    return client;
  }
  void check_open() {
    if (!hosted) (void)get();
  }
};

class PyPlaceholder {
 public:
  PyPlaceholder(Placeholder p, std::shared_ptr<ClientBox> box) : p_(std::move(p)), box_(std::move(box)) {}

  // Waits (GIL released, in slices, checking for Ctrl-C between them) and returns the message.
  const Msg& get(std::optional<double> timeout);
  const Placeholder& placeholder() const { return p_; }

  // The next chunk of a streamed reply (reply_stream) as str, or None once the reply is
  // complete; raises the call's agentd.Error after the chunks sent before a failure. Waits like
  // get() (GIL released, in slices, Ctrl-C between them).
  py::object next_chunk(std::optional<double> timeout);

 private:
  Placeholder p_;
  std::shared_ptr<ClientBox> box_;
  std::shared_ptr<Msg> cached_;
};

class PyAgentRef {
 public:
  PyAgentRef(AgentRef r, std::shared_ptr<ClientBox> box) : r_(std::move(r)), box_(std::move(box)) {}

  const AgentRef& ref() const { return r_; }
  PyPlaceholder wrap(Placeholder p) const { return PyPlaceholder(std::move(p), box_); }

  PyPlaceholder reply(const py::object& x) const;
  PyPlaceholder reply_stream(const py::object& x) const;
  void observe(const py::object& x) const;
  py::object call(const std::string& method, const py::object& args) const;
  PyPlaceholder call_async(const std::string& method, const py::object& args) const;
  std::vector<Msg> memory() const;
  AgentInfo info() const;

 private:
  // Runs f with x as the C++ input (a Placeholder, never waited for here, or a Msg), the GIL
  // released; anything else raises TypeError("agentd: " + usage).
  template <typename F>
  auto with_input(const py::object& x, const char* usage, F f) const
      -> decltype(f(std::declval<const Msg&>()));

  AgentRef r_;
  std::shared_ptr<ClientBox> box_;
};

// Defines agentd.Placeholder and agentd.AgentRef in m.
void bind_agent_ref(py::module_& m);

}  // namespace agentd::python
