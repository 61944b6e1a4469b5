// Agents written in Python, hosted by as_server (README "Writing an agent in Python").
//
// as_server --agent-dir DIR loads the Python host plugin (host_plugin.cpp), which starts CPython
// and imports agentd; load_agent_classes() below (reached through the module's capsule
// `_agentd._host_api`) imports DIR/*.py and registers one C++ agent class per Python class. Each
// hosted agent is a C++ agent (agentd::Agent or agentd::AsyncAgent) holding its Python object,
// so the server's host treats it exactly as a C++ plugin's agent: ordering, the result pool,
// durability (memory() is the C++ Memory; save_state() goes through Python), limits, spans.
//
// Who runs Python code, and when the GIL is held:
// - Blocking agents (a plain `def reply`): on the host's worker threads, holding the GIL only
//   while Python code runs. Every wait in agentd (model calls, Placeholder.get(), and Python's
//   own time.sleep and I/O) releases it, so blocking agents that wait run in parallel.
// - Asynchronous agents (`async def reply`): on one asyncio loop thread per server (the host's
//   asyncio thread, as Ray runs async actors). The server's event loop never takes the GIL: it
//   posts each call to that thread through a Completions queue (completions.h) and is resumed
//   when the Python task ends. Model calls made with `await model.chat_async(...)` run on the
//   server's event loop (no thread), `await placeholder` waits without a thread too.
// - Constructors, load_state() and destructors run on the host's lifecycle workers with the GIL.
// - A watchdog thread notices an asyncio loop that has not run for 2 s (an async agent that
//   blocks it) and logs where it is stuck (host_state.cpp).
#pragma once

#include <agentd/agent.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace agentd::python {

namespace py = pybind11;

// One class load_agent_classes() found.
struct LoadedClass {
  std::string name;
  std::string source;  // "DIR/file.py"
};

// GIL held (start-up, the plugin's thread): imports every DIR/*.py, registers its agent classes
// and starts the asyncio thread. Throws std::runtime_error with a message naming FILE:LINE for a
// module that fails to import, and both files for a class defined twice.
std::vector<LoadedClass> load_agent_classes(const std::vector<std::string>& dirs);

// The factory of every Python class (the class is init.class_name).
std::unique_ptr<Agent> make_python_agent(AgentInit init);

// GIL not held: stops the asyncio thread and the watchdog (every hosted agent is gone).
void stop_python_host();

// Any thread: times the asyncio loop went 2 s without running (the watchdog's count).
std::uint64_t python_loop_stalls();

// The capsule the plugin reads (`_agentd._host_api`): these three functions.
struct HostApi {
  int version = 1;
  std::vector<LoadedClass> (*load)(const std::vector<std::string>& dirs) = &load_agent_classes;
  std::unique_ptr<Agent> (*factory)(AgentInit init) = &make_python_agent;
  void (*stop)() = &stop_python_host;
  std::uint64_t (*stalls)() = &python_loop_stalls;
};

// Binds _agentd._host_api and the types hosted agents use (agent_context.cpp).
void bind_hosting(py::module_& m);

}  // namespace agentd::python
