// agentd::Agent: the base class of every agent, and AGENTD_REGISTER_AGENT for plugins.
#pragma once

#include <agentd/model.h>
#include <agentd/tool.h>
#include <agentd/msg.h>
#include <agentd/task.h>
#include <agentd/value.h>
#include <agentd/version.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {
struct PluginTable;
}
// The entry point as_server looks up with dlsym in each plugin (defined at the end of this file).
extern "C" const agentd::detail::PluginTable* agentd_plugin_table_v1();

namespace agentd {

class AgentRef;  // agentd/client.h

namespace detail {
class AgentServices;  // what the hosting server gives its agents (models, ...); owned by the host
struct AgentAccess;   // the host's hook to set the running call's chunk sink (private header)
}  // namespace detail

// An agent's memory: the messages it has seen and said, in order.
// Not thread-safe on its own; the host runs one call of an agent at a time.
// With as_server --state-dir the host saves it after every call, writing only the messages
// added since the last save (all of them again after a clear()).
class Memory {
 public:
  void add(const Msg& m) { msgs_.push_back(m); }
  void add(Msg&& m) { msgs_.push_back(std::move(m)); }
  const std::vector<Msg>& get() const { return msgs_; }
  std::size_t size() const { return msgs_.size(); }
  void clear() {
    msgs_.clear();
    ++clears_;
  }

 private:
  friend struct detail::AgentAccess;
  std::vector<Msg> msgs_;
  std::uint64_t clears_ = 0;  // how the state store tells "appended" from "rewritten"
};

// What an agent is constructed from. The host fills it in; pass it on to agentd::Agent.
struct AgentInit {
  std::string id;
  std::string name;
  std::string class_name;
  Value args;
  detail::AgentServices* services = nullptr;  // borrowed; outlives the agent
};

// Subclass, override reply(), and register the class with AGENTD_REGISTER_AGENT.
//
// Threading: the host calls an agent's methods one at a time, in the order its callers issued
// them, on worker threads (never on the RPC thread), so agent code may block and needs no locks
// for its own state. Different agents run in parallel. An agent that waits most of the time (on
// models, timers, other agents) is better written as an AsyncAgent (below), which waits without
// holding a thread.
class Agent {
 public:
  explicit Agent(AgentInit init);
  virtual ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Answers a message. Throwing makes the caller's placeholder fail with agent_failed, naming
  // this agent, its class and the exception's message; the agent stays usable.
  virtual Msg reply(const Msg& x) = 0;

  // Takes a message without answering. Default: adds it to memory().
  virtual void observe(const Msg& x);

  // A named synchronous method (AgentRef::call). Default: dispatches to methods registered with
  // register_method(); an unknown name fails with unknown_method listing the known ones.
  virtual Value call(const std::string& method, const Value& args);

  const std::string& id() const { return init_.id; }
  const std::string& name() const { return init_.name; }
  const std::string& class_name() const { return init_.class_name; }
  const Value& args() const { return init_.args; }
  Memory& memory() { return memory_; }
  const Memory& memory() const { return memory_; }

  // The model configured under config_name on the hosting server (see --model-config-path):
  // chat types answer chat()/stream(), embedding types embed() (see agentd/model.h). Throws agentd::Error
  // (config_error) naming the known configs when there is none.
  std::shared_ptr<ChatModel> model(const std::string& config_name);

  // The tools of the MCP servers configured on the hosting server (--tool-config-path; see
  // agentd/tool.h): tools()->list({"fs/*"}), tools()->call("fs/read_file", {{"path", p}}), or
  // co_await tools()->call_async(...) in an asynchronous agent. Each call is recorded in the
  // running call's span. A server without tool servers answers an empty list. Throws
  // agentd::Error(config_error) for an agent not hosted by a server.
  std::shared_ptr<Tools> tools();

  // Names of the methods register_method() added, sorted.
  std::vector<std::string> method_names() const;

  // Durable state (as_server --state-dir, and Client::clone_agent). The host always saves what
  // this base class owns (id, name, class, args and memory()); save_state() returns the
  // subclass's own fields, which load_state() gets back after the constructor has run with the
  // same args, when the server restarts or the agent is cloned. Default: null / nothing.
  //
  //   agentd::Value save_state() const override { return agentd::Value{{"count", count_}}; }
  //   void load_state(const agentd::Value& s) override { count_ = s.value("count", 0); }
  //
  // save_state() runs after every call, on the thread that ran it (keep it cheap: it is
  // encoded and compared with the last saved copy, and written only when it changed). What it
  // throws fails that call; load_state() throwing fails the restart or the clone, naming the
  // agent. Leave them out when everything lives in memory().
  virtual Value save_state() const;
  virtual void load_state(const Value& state);

 protected:
  using Method = std::function<Value(const Value& args)>;
  void register_method(std::string name, Method fn);

  // Streamed replies: sends text to the caller as the next chunk of the reply being produced,
  // e.g. each piece of model("x")->stream(msgs, on_chunk). Chunks reach a caller that asked for
  // them (AgentRef::reply_stream, `agentctl call --stream`) in the order emitted (empty ones are
  // skipped), all before the call's result; the message reply() returns is still the whole
  // result that get() and consuming agents receive (chunks are not joined into it). Without such
  // a caller, or outside a call, a chunk is dropped at the cost of one test.
  // Call it only while the call runs (before reply() returns), from the thread running it or any
  // thread the call waits for; the host hands chunks to its loop thread (never blocks on I/O).
  void emit_chunk(std::string_view text);
  // True while the running call's caller reads chunks (worth streaming from the model).
  bool streaming() const { return static_cast<bool>(chunk_sink_); }

 private:
  friend struct detail::AgentAccess;
  // Set by the host around a call whose caller reads chunks; empty otherwise.
  std::function<void(std::string_view)> chunk_sink_;

  // The hosting server's services (null for an agent built outside a server).
  detail::AgentServices* services() const { return init_.services; }
  friend AgentRef connect_agent(Agent& caller, const Value& ref);

  AgentInit init_;
  Memory memory_;
  std::map<std::string, Method, std::less<>> methods_;
};

// An agent whose calls are coroutines: override reply_async() (and, if wanted, observe_async()
// and call_async()), and register the class with AGENTD_REGISTER_AGENT like any agent.
//
//   class Greeter : public agentd::AsyncAgent {
//    public:
//     using AsyncAgent::AsyncAgent;
//     agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
//       co_await agentd::sleep_for(std::chrono::seconds(1));              // a timer, no thread
//       std::vector<agentd::Msg> prompt(1, x);  // no braced lists in coroutines (GCC 12)
//       auto answer = co_await model("gpt")->chat_async(prompt);            // HTTP on the loop
//       co_return agentd::Msg(name(), answer.msg.content);
//     }
//   };
//
// Threading: the code runs on the hosting server's event-loop thread between suspensions (see
// agentd/task.h): it must not block; co_await instead, or co_await agentd::run_blocking(fn).
// Actor semantics are those of every agent: a call that is suspended still holds its agent, so
// the agent's next call starts only after it finishes, in the order the calls were made; other
// agents (and the server's connections) go on meanwhile. The arguments (x, method, args) stay
// valid until the call finishes. GCC 12 miscompiles braced initializer lists inside coroutine
// bodies: build such values in ordinary functions. What a coroutine throws, before or after a suspension,
// fails the call exactly as a throwing reply() does. The constructor and destructor still run on workers.
class AsyncAgent : public Agent {
 public:
  using Agent::Agent;

  virtual Task<Msg> reply_async(const Msg& x) = 0;

  // Default: observe(x) (adds x to memory()).
  virtual Task<void> observe_async(const Msg& x);

  // A named method. Default: the methods registered with register_async_method(), then those
  // registered with register_method(); an unknown name fails with unknown_method listing both.
  virtual Task<Value> call_async(const std::string& method, const Value& args);

  // Names of the methods register_async_method() and register_method() added, sorted.
  std::vector<std::string> async_method_names() const;

 protected:
  using AsyncMethod = std::function<Task<Value>(const Value& args)>;
  void register_async_method(std::string name, AsyncMethod fn);

 private:
  // The host calls reply_async(); this fails with a message saying so if anything calls it.
  Msg reply(const Msg& x) final;

  std::map<std::string, AsyncMethod, std::less<>> async_methods_;
};

using AgentFactory = std::unique_ptr<Agent> (*)(AgentInit init);

// One agent class as a plugin exports it.
struct AgentClass {
  std::string name;
  AgentFactory factory;
};

namespace detail {

// The table a plugin shared object exports (symbol agentd_plugin_table_v1). Each shared object
// gets its own table: the function below has hidden visibility, so plugins never share it.
struct PluginTable {
  int abi_version = AGENTD_ABI_VERSION;
  const char* agentd_version = AGENTD_VERSION_STRING;
  std::vector<AgentClass> classes;
};

__attribute__((visibility("hidden"))) inline PluginTable& this_module_plugin_table() {
  static PluginTable table;
  return table;
}

template <typename T>
std::unique_ptr<Agent> make_agent(AgentInit init) {
  return std::make_unique<T>(std::move(init));
}

struct AgentRegistrar {
  AgentRegistrar(const char* name, AgentFactory factory) {
    this_module_plugin_table().classes.push_back(AgentClass{name, factory});
  }
};

}  // namespace detail

// The agent classes registered with AGENTD_REGISTER_AGENT in the calling executable or library.
// Client::local() uses it so programs can host their own agent classes in-process.
__attribute__((visibility("hidden"))) inline std::vector<AgentClass> this_module_agent_classes() {
  return detail::this_module_plugin_table().classes;
}

// Describes one class explicitly, without registration.
template <typename T>
AgentClass agent_class(std::string name) {
  return AgentClass{std::move(name), &detail::make_agent<T>};
}

}  // namespace agentd

// Inline and `used` (so every module that includes this header carries one copy) with default
// visibility (so dlsym on a plugin's handle finds the plugin's own, which is searched first);
// it returns that module's own hidden table.
extern "C" __attribute__((visibility("default"), used)) inline const agentd::detail::PluginTable*
agentd_plugin_table_v1() {
  return &agentd::detail::this_module_plugin_table();
}

#define AGENTD_CONCAT_INNER_(a, b) a##b
#define AGENTD_CONCAT_(a, b) AGENTD_CONCAT_INNER_(a, b)

// Registers an agent class under its C++ name: AGENTD_REGISTER_AGENT(WebAgent);
#define AGENTD_REGISTER_AGENT(Class)                                                          \
  static const ::agentd::detail::AgentRegistrar AGENTD_CONCAT_(agentd_registrar_, __LINE__) { \
#Class, &::agentd::detail::make_agent < Class>                                            \
  }
