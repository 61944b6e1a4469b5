// Example plugin: asynchronous agents (agentd::AsyncAgent). Their calls are coroutines that run
// on the server's event loop and wait on timers, models and other agents without holding a
// thread, so a server with a handful of threads keeps thousands of them waiting at once.
// The benchmark (agentd-bench W1 async, W7 async) and the tests use them.
#include <agentd/agent.h>
#include <agentd/client.h>
#include <agentd/error.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;

namespace {

// How many calls of every WaitAgent in this server are suspended right now, and the most there
// have been at once (method "peak"): the tests check waiting calls hold no thread.
std::atomic<std::int64_t> g_waiting{0};
std::atomic<std::int64_t> g_peak{0};

std::chrono::milliseconds ms_arg(const agentd::Value& v, const char* key, std::int64_t fallback) {
  if (!v.is_object() || !v.contains(key)) return std::chrono::milliseconds(fallback);
  if (!v[key].is_number_integer() || v[key].get<std::int64_t>() < 0)
    throw agentd::Error(agentd::ErrorCode::bad_args,
                        std::string(key) + " must be a non-negative integer (milliseconds)");
  return std::chrono::milliseconds(v[key].get<std::int64_t>());
}

}  // namespace

// Replies with its input's content at once, never suspending: the asynchronous form of
// EchoAgent, with no worker thread involved.
class AsyncEchoAgent : public agentd::AsyncAgent {
 public:
  using AsyncAgent::AsyncAgent;
  agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
    co_return agentd::Msg(name(), x.content);
  }
};
AGENTD_REGISTER_AGENT(AsyncEchoAgent);

// Waits, then echoes: args {"sleep_ms": N} (default 1000); an input {"sleep_ms": M} waits M
// instead. Input "fail" throws after waiting. Remembers what it hears and says, like EchoAgent.
// Methods: "peak" (most calls suspended at once, server-wide), "reset_peak", "nap" (an
// asynchronous method: {"ms": N} waits N ms and returns N).
class WaitAgent : public agentd::AsyncAgent {
 public:
  explicit WaitAgent(agentd::AgentInit init) : AsyncAgent(std::move(init)) {
    sleep_ = ms_arg(args(), "sleep_ms", 1000);
    register_method("peak", [](const agentd::Value&) { return agentd::Value(g_peak.load()); });
    register_method("reset_peak", [](const agentd::Value&) {
      g_peak = g_waiting.load();
      return agentd::Value(true);
    });
    register_async_method("nap", [](const agentd::Value& a) -> agentd::Task<agentd::Value> {
      auto ms = ms_arg(a, "ms", 0);
      co_await agentd::sleep_for(ms);
      co_return agentd::Value(ms.count());
    });
  }

  agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
    memory().add(x);
    const auto wait = ms_arg(x.content, "sleep_ms", sleep_.count());
    const std::int64_t now = ++g_waiting;
    std::int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    co_await agentd::sleep_for(wait);
    --g_waiting;
    if (x.content == "fail")
      throw agentd::Error(agentd::ErrorCode::agent_failed, "failed on request, after waiting");
    agentd::Msg out(name(), x.content);
    memory().add(out);
    co_return out;
  }

 private:
  std::chrono::milliseconds sleep_;
};
AGENTD_REGISTER_AGENT(WaitAgent);

// Asks a model without holding a thread: args {"model": config name (default "echo"),
// "stream": true to use stream_async and put the chunk count in the reply's metadata}. When the
// caller reads the reply as a stream (AgentRef::reply_stream), the model's chunks are passed on
// as they arrive.
class AskAgent : public agentd::AsyncAgent {
 public:
  using AsyncAgent::AsyncAgent;
  agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
    auto m = model(args().value("model", std::string("echo")));
    // No braces ({...}) in a coroutine's body: GCC 12 miscompiles them there (README).
    std::vector<agentd::Msg> question(1, agentd::Msg("user", x.content, "user"));
    const bool stream = args().value("stream", false) || streaming();
    int chunks = 0;
    agentd::ChatResponse answer;
    if (stream) {
      answer = co_await m->stream_async(std::move(question), [this, &chunks](std::string_view c) {
        ++chunks;
        emit_chunk(c);
      });
    } else {
      answer = co_await m->chat_async(std::move(question));
    }
    agentd::Msg out(name(), answer.msg.content);
    if (stream) out.metadata["chunks"] = chunks;
    memory().add(out);
    co_return out;
  }
};
AGENTD_REGISTER_AGENT(AskAgent);

// Calls the MCP tools of the hosting server (as_server --tool-config-path; agentd/tool.h)
// without holding a thread: the input is {"tool": "SERVER/TOOL", "arguments": {...}}, the reply's
// content the tool's result ({"content": [...], "isError": ...}). A thousand of these waiting on
// slow tools hold no worker. Method "repeat" {"tool", "arguments", "n"} makes n calls one after
// another and answers each one's time in microseconds ({"us": [...]}: agentd-bench W16).
class AsyncToolAgent : public agentd::AsyncAgent {
 public:
  explicit AsyncToolAgent(agentd::AgentInit init) : AsyncAgent(std::move(init)) {
    register_async_method("repeat", [this](const agentd::Value& a) { return repeat(a); });
  }

  agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
    agentd::ToolResult r = co_await tools()->call_async(
        x.content.at("tool").get<std::string>(), x.content.value("arguments", agentd::Value::object()));
    co_return agentd::Msg(name(), r.to_value());
  }

 private:
  agentd::Task<agentd::Value> repeat(agentd::Value a) {
    const std::string tool = a.at("tool").get<std::string>();
    const agentd::Value arguments = a.value("arguments", agentd::Value::object());
    const std::int64_t n = a.value("n", std::int64_t{1});
    agentd::Value us = agentd::Value::array();
    for (std::int64_t i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      agentd::ToolResult r = co_await tools()->call_async(tool, arguments);
      if (r.is_error)
        throw agentd::Error(agentd::ErrorCode::agent_failed, "the tool reported an error: " + r.text());
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    agentd::Value out = agentd::Value::object();
    out["us"] = std::move(us);
    co_return out;
  }
};
AGENTD_REGISTER_AGENT(AsyncToolAgent);

// Forwards its input to the agent args["target"] names (an AgentRef::to_value(), on this server
// or another) and awaits that agent's placeholder: "x" -> "relayed: <target's reply>".
class AsyncRelayAgent : public agentd::AsyncAgent {
 public:
  using AsyncAgent::AsyncAgent;
  agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
    agentd::AgentRef target = agentd::connect_agent(*this, args().at("target"));
    agentd::Msg answer = co_await target.reply(x);
    co_return agentd::Msg(name(), "relayed: " + answer.text());
  }
};
AGENTD_REGISTER_AGENT(AsyncRelayAgent);

// An ordinary function (not a coroutine) builds the braced value: see AskAgent.
agentd::Value thread_report(std::size_t worker, std::size_t loop, bool resumed_on_loop) {
  return agentd::Value{{"worker_thread", std::to_string(worker)},
                       {"loop_thread", std::to_string(loop)},
                       {"resumed_on_loop", resumed_on_loop}};
}

// Moves blocking work off the loop: input {"block_ms": N} blocks a worker thread N ms
// (run_blocking) and replies with the id of the thread that blocked, which is never the
// loop thread the agent's own code runs on (also in the reply, as "loop_thread").
class OffloadAgent : public agentd::AsyncAgent {
 public:
  using AsyncAgent::AsyncAgent;
  agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
    const auto block = ms_arg(x.content, "block_ms", 10);
    auto here = std::hash<std::thread::id>{}(std::this_thread::get_id());
    auto worker = co_await agentd::run_blocking([block] {
      std::this_thread::sleep_for(block);
      return std::hash<std::thread::id>{}(std::this_thread::get_id());
    });
    auto after = std::hash<std::thread::id>{}(std::this_thread::get_id());
    co_return agentd::Msg(name(), thread_report(worker, here, here == after));
  }
};
AGENTD_REGISTER_AGENT(OffloadAgent);
