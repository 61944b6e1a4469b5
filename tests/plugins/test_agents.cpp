// Agents only the tests use, next to the example plugin's EchoAgent / TrailAgent / FlakyAgent.
#include <agentd/agent.h>
#include <agentd/error.h>

#include <chrono>
#include <cstdlib>
#include <cstddef>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

// Replies with a text of args {"bytes": N} (default 1 MiB) copies of 'b', whatever the input.
// Cross-server tests use it to make a big message on one server.
class BigTextAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg&) override {
    auto n = args().value("bytes", std::size_t{1} << 20);
    return agentd::Msg(name(), std::string(n, 'b'));
  }
};
AGENTD_REGISTER_AGENT(BigTextAgent);

// Replies with {"size": length of the input's text content, "head": its first 8 characters}.
class TextSizeAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override {
    std::string t = x.content.is_string() ? x.content.get<std::string>() : x.text();
    return agentd::Msg(name(), agentd::Value{{"size", t.size()}, {"head", t.substr(0, 8)}});
  }
};
AGENTD_REGISTER_AGENT(TextSizeAgent);

// Throws something that is not a std::exception from reply.
class WeirdThrowAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg&) override { throw 42; }
};
AGENTD_REGISTER_AGENT(WeirdThrowAgent);

// Its constructor refuses the names in args {"refuse": {"<name>": delay_ms, ...}}: after
// delay_ms it throws bad_args "refusing to be <name>". Other names construct fine and echo,
// after args "slow_ms" (default 0) for every name.
// Bulk-creation tests use it to fail some agents of a batch (and to order when they fail).
class PickyAgent : public agentd::Agent {
 public:
  explicit PickyAgent(agentd::AgentInit init) : Agent(std::move(init)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(args().value("slow_ms", 0)));
    if (!args().contains("refuse") || !args()["refuse"].contains(name())) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(args()["refuse"][name()].get<int>()));
    throw agentd::Error(agentd::ErrorCode::bad_args, "refusing to be " + name());
  }
  agentd::Msg reply(const agentd::Msg& x) override { return agentd::Msg(name(), x.content); }
};
AGENTD_REGISTER_AGENT(PickyAgent);

// Replies like an echo, after args "sleep_ms" (default 0), unless the input's text is "abort"
// (std::abort()) or "segfault" (a write through a null pointer): the server dies in agent code.
// Fault tests use it for a call that crashes the server.
class CrashAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(args().value("sleep_ms", 0)));
    const std::string t = x.content.is_string() ? x.content.get<std::string>() : std::string();
    if (t == "abort") std::abort();
    if (t == "segfault") {
      volatile int* volatile p = nullptr;
      *p = 1;
    }
    memory().add(x);
    return agentd::Msg(name(), x.content);
  }
};
AGENTD_REGISTER_AGENT(CrashAgent);

// Replies with a value nested as deep as its input asks, {"depth": N, "kind": "list"|"object"}:
// N lists ([[...["bottom"]...]]) or N objects ({"d": {"d": ... "bottom"}}); the method "deep"
// returns the same for args of that form. Nesting tests use it for results deeper than a value
// may nest (kMaxValueDepth) and for text that is not UTF-8 ({"bad_utf8": true}: "\xff").
class DeepAgent : public agentd::Agent {
 public:
  explicit DeepAgent(agentd::AgentInit init) : Agent(std::move(init)) {
    register_method("deep", [](const agentd::Value& a) { return make(a); });
  }
  agentd::Msg reply(const agentd::Msg& x) override { return agentd::Msg(name(), make(x.content)); }

 private:
  static agentd::Value make(const agentd::Value& spec) {
    if (spec.value("bad_utf8", false)) return agentd::Value(std::string("bad \xff byte"));
    const int depth = spec.value("depth", 1);
    const bool object = spec.value("kind", std::string("list")) == "object";
    agentd::Value v = "bottom";
    for (int i = 0; i < depth; ++i)
      v = object ? agentd::Value{{"d", std::move(v)}} : agentd::Value::array({std::move(v)});
    return v;
  }
};
AGENTD_REGISTER_AGENT(DeepAgent);

// Stands for agent code stuck in a blocking call (an LLM request that hangs): reply remembers
// its input, then blocks until the file args {"release_file": PATH} exists (checked every
// 5 ms; at most args "max_ms", default 30,000, so a failed test never leaves it stuck).
// Another process (the test) releases it by creating the file. With args {"started_file": PATH}
// it first creates that file: the test knows its call is running agent code, not only handed on.
class BlockAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override {
    memory().add(x);
    if (const std::string started = args().value("started_file", std::string{}); !started.empty())
      std::ofstream(started).flush();
    const std::string path = args().value("release_file", std::string{});
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(args().value("max_ms", 30000));
    while (!path.empty() && ::access(path.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return agentd::Msg(name(), x.content);
  }
};
AGENTD_REGISTER_AGENT(BlockAgent);

// Calls one MCP tool of the hosting server per reply (agentd/tool.h), holding its worker: the
// input is {"tool": "SERVER/TOOL", "arguments": {...}}; the reply's content is the result
// (ToolResult::to_value()). What the call throws fails the agent call (tool_error, timeout).
// (Its asynchronous form is examples/async_agents' AsyncToolAgent.)
// Method "list" (args: a list of patterns) answers the matching tools' qualified names.
class ToolAgent : public agentd::Agent {
 public:
  explicit ToolAgent(agentd::AgentInit init) : Agent(std::move(init)) {
    register_method("list", [this](const agentd::Value& patterns) {
      std::vector<std::string> wanted;
      if (patterns.is_array())
        for (const auto& p : patterns) wanted.push_back(p.get<std::string>());
      agentd::Value names = agentd::Value::array();
      for (const auto& t : tools()->list(wanted)) names.push_back(t.qualified_name());
      return names;
    });
  }
  agentd::Msg reply(const agentd::Msg& x) override {
    const agentd::ToolResult r = tools()->call(x.content.at("tool").get<std::string>(),
                                               x.content.value("arguments", agentd::Value::object()));
    return agentd::Msg(name(), r.to_value());
  }
};
AGENTD_REGISTER_AGENT(ToolAgent);
