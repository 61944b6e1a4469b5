// The pieces hosting.cpp (the agents and the host's asyncio thread) and agent_context.cpp (what
// Python agent code reaches: memory, models, chunks, other agents) share. See hosting.h.
#pragma once

#include "completions.h"

#include <agentd/agent.h>
#include <agentd/error.h>
#include <agentd/task.h>

#include <pybind11/pybind11.h>

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace agentd::python {

namespace py = pybind11;

// The GIL for a thread agentd started (a worker, the watchdog): like py::gil_scoped_acquire, but
// the thread's Python thread state is made once and kept, so taking the GIL per call costs no
// allocation.
class Gil {
 public:
  Gil();
  ~Gil();
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// What load_agent_classes learnt of one Python class (agent.py's _describe). Read-only after
// loading; cls is touched with the GIL only.
struct ClassInfo {
  std::string name;
  std::string source;
  py::object cls;
  bool async_reply = false;
  bool async_observe = false;
  bool custom_observe = false;  // observe() overridden (else the C++ default: add to memory)
  bool custom_state = false;    // save_state() overridden
  std::map<std::string, bool, std::less<>> methods;  // @agentd.method names -> is `async def`
};

// What both kinds of hosted agent give the code around their Python object.
class HostedAgent {
 public:
  virtual ~HostedAgent() = default;
  virtual Agent& agent() = 0;
  virtual const ClassInfo& info() const = 0;
  virtual py::object& self() = 0;  // GIL held
  // Agent::emit_chunk (protected there): from the thread running the call or one it waits for.
  virtual void chunk(std::string_view text) = 0;
  virtual bool is_streaming() const = 0;  // Agent::streaming (protected there)
};

// The Python object's handle on its C++ agent (`self._agentd_ctx`, agentd._AgentContext).
// host is cleared, with the GIL held, when the agent is destroyed: Python code that kept the
// object around then gets an error instead of a dangling agent.
struct AgentContext {
  HostedAgent* host = nullptr;
  HostedAgent& get() const {
    if (host == nullptr) throw Error(ErrorCode::unknown_agent, "this agent has been deleted from its server");
    return *host;
  }
};

// The Python side of the host: the asyncio thread that runs asynchronous agents, its
// Completions queue, and the server's event loop (where their model calls go).
class HostState {
 public:
  static HostState& get();

  // GIL held: starts the asyncio thread (and the watchdog) once.
  void start();
  // GIL not held: stops both (every agent is gone).
  void stop();

  // Any thread: fn runs on the asyncio thread with the GIL. False once stopped.
  bool post(std::function<void()> fn);
  // The asyncio thread's queue (null before start()).
  std::shared_ptr<Completions> completions() const { return completions_; }

  // The server's event loop, learnt from the first asynchronous call (every call of an async
  // agent starts there). Null until then.
  detail::AsyncLoop* server_loop() const { return server_loop_.load(); }
  void note_server_loop(detail::AsyncLoop* loop) { server_loop_.store(loop); }

  // Stalls of the asyncio loop noticed by the watchdog (an async agent that blocked it).
  std::uint64_t stalls() const { return stalls_.load(); }

 private:
  void run_loop();
  void watch();

  std::shared_ptr<Completions> completions_;
  py::object loop_;
  std::atomic<detail::AsyncLoop*> server_loop_{nullptr};
  std::atomic<std::uint64_t> stalls_{0};
  std::atomic<bool> stopping_{false};
  unsigned long loop_thread_id_ = 0;  // threading.get_ident() of the asyncio thread
  struct Threads;
  std::unique_ptr<Threads> threads_;
};

// True on the host's asyncio thread (where asynchronous agents run). A wait there that needs that
// same thread (Placeholder.get() of another Python agent's call, AgentRef.call()) would never
// end, so those fail at once there, as get() does in a C++ asynchronous agent: await instead.
bool on_host_asyncio_thread();

// Python agent code's failure as what the host reports: an agentd.Error keeps its code; any
// other exception becomes agent_failed carrying "Type: message" and a trimmed traceback. GIL held.
std::exception_ptr python_failure(py::error_already_set& e);
std::exception_ptr python_failure(const py::handle& exc);

// The Msg a reply returned (a Msg, or any plain value as the content of one from `name`). GIL held.
Msg reply_msg(const py::handle& r, const std::string& name);

// Binds _AgentContext, _Memory, Model and ChatResponse (agent_context.cpp).
void bind_agent_context(py::module_& m);

}  // namespace agentd::python
