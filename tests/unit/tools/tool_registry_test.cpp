// ToolRegistry and the Tools agents get (make_agent_tools), against real tool server processes:
// tests/mcp/fault_server.py and the reference server-everything.
#include "tool_registry.h"

#include <catch2/catch.hpp>

#include <agentd/error.h>
#include <agentd/task.h>

#include <kj/async-io.h>
#include <kj/vector.h>

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "async_http.h"
#include "async_loop.h"
#include "bridge.h"
#include "child_processes.h"
#include "error_of.h"
#include "mcp_test_support.h"
#include "worker_pool.h"

using agentd::Error;
using agentd::ErrorCode;
using agentd::Task;
using agentd::ToolCallSpan;
using agentd::ToolInfo;
using agentd::ToolResult;
using agentd::ToolServerInfo;
using agentd::Value;
using agentd::detail::AsyncHttp;
using agentd::detail::Bridge;
using agentd::detail::LoopScheduler;
using agentd::detail::make_agent_tools;
using agentd::detail::ToolConfig;
using agentd::detail::ToolRegistry;
using agentd::detail::ToolRegistryHandle;
using agentd::detail::ToolServerConfig;
using agentd::detail::WorkerPool;
using namespace agentd::test;

namespace {

class Ignore final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&&) override {}
};

struct RegistryFixture {
  RegistryFixture() { ignore_sigpipe(); }
  explicit RegistryFixture(std::vector<ToolServerConfig> servers, bool drain = true) : RegistryFixture() {
    registry.emplace(io, http, bridge, ToolConfig{"test.yaml", std::move(servers)});
    if (drain) tasks.add(bridge.run());
  }
  ~RegistryFixture() {
    bridge.close();
    workers.stop();
  }
  kj::AsyncIoContext io = kj::setupAsyncIo();
  Ignore ignore;
  kj::TaskSet tasks{ignore};
  Bridge bridge{io.unixEventPort};
  WorkerPool workers{1, 4};
  LoopScheduler scheduler{io.provider->getTimer(), bridge, workers};
  AsyncHttp http{io};
  std::optional<ToolRegistry> registry;

  kj::WaitScope& ws() { return io.waitScope; }
  void timer_wait(int ms) { io.provider->getTimer().afterDelay(ms * kj::MILLISECONDS).wait(ws()); }
  ToolServerInfo info(const std::string& name) {
    for (auto& s : registry->servers(false).wait(ws()))
      if (s.name == name) return s;
    FAIL("no server " << name);
    return {};
  }
  ToolResult call(const std::string& server, const std::string& tool, Value args = Value::object(),
                  agentd::ToolCallOptions options = {},
                  std::function<void(const ToolCallSpan&)> record = {}) {
    return registry->call(server, tool, std::move(args), options, std::move(record)).wait(ws());
  }
  Error call_error(const std::string& server, const std::string& tool, Value args = Value::object(),
                   agentd::ToolCallOptions options = {},
                   std::function<void(const ToolCallSpan&)> record = {}) {
    return rejection_of(registry->call(server, tool, std::move(args), options, std::move(record)), ws());
  }
};

bool process_exists(int pid) { return agentd::test::process_alive(pid); }

// This process's live children running python3 (the tool servers).
std::vector<pid_t> python_children() { return agentd::test::child_pids(::getpid(), "python3"); }

void sleep_on_loop(kj::AsyncIoContext& io, kj::Duration d) {
  io.provider->getTimer().afterDelay(d).wait(io.waitScope);
}

// Runs a task to its end on the loop's thread (as the host does for asynchronous agents).
struct Runner {
  struct promise_type {
    Runner get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};
template <typename T>
Runner run(Task<T> task, std::optional<T>* out, std::optional<Error>* error) {
  try {
    out->emplace(co_await std::move(task));
  } catch (const Error& e) {
    error->emplace(e);
  }
}

}  // namespace

TEST_CASE("a tool server starts at first use, and servers() shows it idle, then running with its tools",
          "[tools][registry]") {
  RegistryFixture f({fault_config("fault")});
  CHECK(f.registry->size() == 1);
  CHECK(f.info("fault").state == "idle");
  CHECK(f.call("fault", "echo", {{"text", "hi"}}).text() == "echo: hi");
  ToolServerInfo info = f.info("fault");
  CHECK(info.state == "running");
  CHECK(info.transport == "stdio");
  CHECK(info.protocol_version == "2025-11-25");
  CHECK(info.server_name == "fault-server");
  CHECK(info.server_version == "1.2.3");
  CHECK(info.tools.size() == 12);
  CHECK(info.usage.calls == 1);
  CHECK(info.restarts == 0);
}

TEST_CASE(
    "unknown servers and tools, and tools allow_tools leaves out, fail with tool_error naming what exists",
    "[tools][registry]") {
  auto limited = fault_config("limited");
  limited.allow_tools = {"echo"};
  RegistryFixture f({fault_config("fault"), limited});
  Error no_server = f.call_error("nope", "echo");
  CHECK(no_server.code() == ErrorCode::tool_error);
  CHECK_THAT(no_server.message(), Catch::Contains("'nope'") && Catch::Contains("fault, limited"));
  Error no_tool = f.call_error("fault", "nope");
  CHECK(no_tool.code() == ErrorCode::tool_error);
  CHECK_THAT(no_tool.message(), Catch::Contains("no tool 'nope'") && Catch::Contains("echo, add"));
  Error not_allowed = f.call_error("limited", "add");
  CHECK(not_allowed.code() == ErrorCode::tool_error);
  CHECK_THAT(not_allowed.message(), Catch::Contains("its tools: echo)"));
  CHECK(f.call("limited", "echo", {{"text", "ok"}}).text() == "echo: ok");
}

TEST_CASE(
    "list() gathers every server's tools by pattern, sorted, and a server that cannot start is left out",
    "[tools][registry]") {
  RegistryFixture f({fault_config("b"), fault_config("a"), fault_config("broken", {"--exit-at-start", "1"})});
  auto tools = f.registry->list({"*/echo", "a/add"}).wait(f.ws());
  std::vector<std::string> names;
  for (const auto& t : tools) names.push_back(t.qualified_name());
  CHECK(names == std::vector<std::string>{"a/add", "a/echo", "b/echo"});
  CHECK(f.registry->list({}).wait(f.ws()).size() == 24);
  ToolServerInfo broken = f.info("broken");
  CHECK(broken.state == "failed");
  CHECK_THAT(broken.error, Catch::Contains("exited with status 1"));
  // Within its backoff a failed server refuses at once (retryable), naming why.
  Error e = f.call_error("broken", "echo");
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Catch::Contains("could not start") && Catch::Contains("exited with status 1"));
}

TEST_CASE("a server that dies fails its calls in flight (retryable) and is started again at next use",
          "[tools][registry]") {
  RegistryFixture f({fault_config("phoenix")});
  CHECK(f.call("phoenix", "echo", {{"text", "1"}}).text() == "echo: 1");
  auto slow = f.registry->call("phoenix", "slow", {{"seconds", 30}}, {}, {});
  run_until(f.io, [&] { return f.registry->in_flight() == 1; });
  Error died = f.call_error("phoenix", "exit", {{"status", 4}});
  CHECK(died.code() == ErrorCode::tool_error);
  CHECK(died.retryable());
  Error other = rejection_of(kj::mv(slow), f.ws());
  CHECK(other.retryable());
  ToolServerInfo info = f.info("phoenix");
  CHECK(info.state == "restarting");
  CHECK_THAT(info.error, Catch::Contains("exited with status 4"));
  // Within the backoff (1 s) a call is refused at once (retryable), saying when it starts again.
  const auto t0 = std::chrono::steady_clock::now();
  Error early = f.call_error("phoenix", "echo", {{"text", "early"}});
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500));
  CHECK(early.code() == ErrorCode::tool_error);
  CHECK(early.retryable());
  CHECK_THAT(early.message(), Catch::Contains("died") && Catch::Contains("starts again at the next use in"));
  // After it, the next use starts it again.
  sleep_on_loop(f.io, 1100 * kj::MILLISECONDS);
  CHECK(f.call("phoenix", "echo", {{"text", "2"}}).text() == "echo: 2");
  info = f.info("phoenix");
  CHECK(info.state == "running");
  CHECK(info.restarts == 1);
}

TEST_CASE("start() starts the at_start servers in the background", "[tools][registry]") {
  auto eager = fault_config("eager");
  eager.start_at_launch = true;
  RegistryFixture f({eager, fault_config("lazy")});
  f.registry->start();
  run_until(f.io, [&] { return f.info("eager").state == "running"; });
  CHECK(f.info("lazy").state == "idle");
  auto all = f.registry->servers(true).wait(f.ws());
  CHECK(all.at(1).state == "running");
}

TEST_CASE("timeouts, failures and results are counted in metrics() and recorded in spans",
          "[tools][registry]") {
  RegistryFixture f({fault_config("m")});
  std::vector<ToolCallSpan> spans;
  auto record = [&](const ToolCallSpan& s) { spans.push_back(s); };
  f.call("m", "echo", {{"text", "x"}}, {}, record);
  CHECK(f.call("m", "fail", Value::object(), {}, record).is_error);
  Error t = f.call_error("m", "never", Value::object(), {std::chrono::milliseconds(200)}, record);
  CHECK(t.code() == ErrorCode::timeout);
  REQUIRE(spans.size() == 3);
  CHECK(spans[0].tool == "m/echo");
  CHECK(spans[0].outcome == "ok");
  CHECK(spans[0].start_unix_ns > 0);
  CHECK(spans[1].outcome == "is_error");
  CHECK(spans[2].outcome == "timeout");
  CHECK_THAT(spans[2].error_message, Catch::Contains("no answer within"));
  CHECK(spans[2].duration_ns >= 200'000'000);

  auto rows = f.registry->metrics();
  auto row = [&](const std::string& tool) {
    for (const auto& r : rows)
      if (r.server == "m" && r.tool == tool) return r;
    FAIL("no metrics row for " << tool);
    return agentd::detail::ToolMetrics{};
  };
  CHECK(row("").usage.calls == 3);
  CHECK(row("").usage.failures == 2);
  CHECK(row("echo").usage.calls == 1);
  CHECK(row("echo").usage.failures == 0);
  CHECK(row("echo").buckets.back() == 1);  // under 60 s
  CHECK(row("never").usage.failures == 1);
  CHECK(row("never").buckets[0] == 0);  // not under 0.5 ms

  // An unknown tool counts in the server's total only: no row per name a caller makes up.
  f.call_error("m", "made_up_name", Value::object(), {}, record);
  rows = f.registry->metrics();
  CHECK(row("").usage.calls == 4);
  CHECK(std::none_of(rows.begin(), rows.end(), [](const auto& r) { return r.tool == "made_up_name"; }));
  CHECK(spans.back().tool == "m/made_up_name");

  // A call whose caller stops waiting is counted and recorded as "cancelled".
  {
    auto dropped = f.registry->call("m", "never", Value::object(), {}, record);
    run_until(f.io, [&] { return f.registry->in_flight() == 1; });
  }
  REQUIRE(spans.size() == 5);
  CHECK(spans.back().outcome == "cancelled");
  rows = f.registry->metrics();
  CHECK(row("never").usage.calls == 2);
  CHECK(row("never").usage.failures == 2);
}

TEST_CASE("calls issued just before stop() or a reload removes their server fail (retryable), never crash",
          "[tools][registry]") {
  RegistryFixture f({fault_config("a"), fault_config("b")});
  f.call("a", "echo", {{"text", "x"}});
  f.call("b", "echo", {{"text", "x"}});
  // The server runs: each call's next step is queued; the reload moves the session out first.
  kj::Vector<kj::Promise<ToolResult>> calls;
  for (int i = 0; i < 50; ++i)
    calls.add(f.registry->call("a", "echo", {{"text", std::to_string(i)}}, {}, {}));
  f.registry->reconfigure(ToolConfig{"test.yaml", {fault_config("b")}});
  for (auto& c : calls) {
    Error e = rejection_of(kj::mv(c), f.ws());
    CHECK(e.code() == ErrorCode::tool_error);
    CHECK(e.retryable());
  }
  // The same with stop().
  kj::Vector<kj::Promise<ToolResult>> more;
  for (int i = 0; i < 50; ++i) more.add(f.registry->call("b", "echo", {{"text", std::to_string(i)}}, {}, {}));
  auto stopped = f.registry->stop(5 * kj::SECONDS);
  for (auto& c : more) {
    Error e = rejection_of(kj::mv(c), f.ws());
    CHECK(e.code() == ErrorCode::tool_error);
    CHECK(e.retryable());
    CHECK_THAT(e.message(), Catch::Contains("closed before the call"));
  }
  stopped.wait(f.ws());
}

TEST_CASE("a server dying while calls keep coming: each fails (retryable) or succeeds, nothing crashes",
          "[tools][registry]") {
  RegistryFixture g({fault_config("d")});
  g.call("d", "echo", {{"text", "x"}});
  kj::Vector<kj::Promise<ToolResult>> racing;
  racing.add(g.registry->call("d", "exit", {{"status", 5}}, {}, {}));
  for (int i = 0; i < 200; ++i) {
    racing.add(g.registry->call("d", "echo", {{"text", std::to_string(i)}}, {}, {}));
    g.ws().poll();
  }
  for (auto& c : racing) c.then([](ToolResult) {}, [](kj::Exception&&) {}).wait(g.ws());
}

TEST_CASE("a reload that removes a server during its backoff: nothing of it is started again",
          "[tools][registry]") {
  RegistryFixture f({fault_config("p")});
  f.call("p", "echo", {{"text", "x"}});
  f.call_error("p", "exit", {{"status", 1}});
  CHECK(f.info("p").state == "restarting");
  CHECK(f.call_error("p", "echo").retryable());  // within the backoff
  run_until(f.io, [&] { return python_children().empty(); });
  f.registry->reconfigure(ToolConfig{"test.yaml", {fault_config("other")}});
  sleep_on_loop(f.io, 1500 * kj::MILLISECONDS);  // past the backoff
  CHECK(python_children().empty());
  CHECK(f.info("other").state == "idle");
  CHECK(f.call_error("p", "echo").message().find("no tool server named 'p'") != std::string::npos);
}

TEST_CASE("what a tool server started dies with it: when it dies, and when it is stopped",
          "[tools][registry]") {
  RegistryFixture f({fault_config("g", {"--more-tools"})});
  const int first = std::stoi(f.call("g", "spawn_sleeper").text());
  REQUIRE(process_exists(first));
  f.call_error("g", "exit", {{"status", 1}});
  run_until(f.io, [&] { return !process_exists(first); });
  sleep_on_loop(f.io, 1100 * kj::MILLISECONDS);  // the backoff
  const int second = std::stoi(f.call("g", "spawn_sleeper").text());
  REQUIRE(process_exists(second));
  f.registry->stop(2 * kj::SECONDS).wait(f.ws());
  run_until(f.io, [&] { return !process_exists(second); });
}

TEST_CASE("notifications/tools/list_changed makes the registry read the tools again", "[tools][registry]") {
  RegistryFixture f({fault_config("c")});
  f.call("c", "change_tools");
  run_until(f.io, [&] { return f.info("c").tools.size() == 13; });
  // The registry now lets a call to it through to the server (which has no code for it).
  CHECK_THAT(f.call_error("c", "added").message(), Catch::Contains("refused tools/call 'added'"));
}

TEST_CASE("a flood of list_changed notifications costs one tools/list at a time", "[tools][registry]") {
  RegistryFixture f({fault_config("flood", {"--more-tools"})});
  f.call("flood", "spam_changed", {{"count", 200}});
  f.timer_wait(500);
  Value stats = Value::parse(f.call("flood", "stats").text());
  // 1 at start, then at most one in flight plus one coalesced re-read at a time.
  CHECK(stats["tools_list"].get<int>() <= 10);
  CHECK(stats["tools_list"].get<int>() >= 2);
}

TEST_CASE("stop() ends every server, and later calls fail with Error(stopping)", "[tools][registry]") {
  RegistryFixture f({fault_config("s1"), fault_config("s2")});
  f.call("s1", "echo", {{"text", "x"}});
  f.call("s2", "echo", {{"text", "x"}});
  auto pending = f.registry->call("s1", "never", Value::object(), {}, {});
  run_until(f.io, [&] { return f.registry->in_flight() == 1; });
  f.registry->stop(5 * kj::SECONDS).wait(f.ws());
  Error e = rejection_of(kj::mv(pending), f.ws());
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK(e.retryable());
  CHECK(f.info("s1").state == "stopped");
  CHECK(f.call_error("s2", "echo").code() == ErrorCode::stopping);
}

TEST_CASE("tool server processes die with the registry", "[tools][registry]") {
  int pid = 0;
  const auto before = agentd::test::child_pids(::getpid(), "python3");
  {
    RegistryFixture f({fault_config("gone")});
    f.call("gone", "echo", {{"text", "x"}});
    // The tool server is this process's direct child running python3 (not one of an earlier
    // case's, still on its way out).
    for (pid_t child : agentd::test::child_pids(::getpid(), "python3"))
      if (std::find(before.begin(), before.end(), child) == before.end()) pid = child;
    REQUIRE(process_exists(pid));
  }
  CHECK_FALSE(process_exists(pid));
}

TEST_CASE("agent Tools without tool servers: an empty list, and calls name the missing option",
          "[tools][agent]") {
  auto tools = make_agent_tools(nullptr, {});
  CHECK(tools->list().empty());
  Error e = error_of([&] { tools->call("fs/read_file"); });
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK(e.message() ==
        "no tool server named 'fs': this server has no tool servers (as_server --tool-config-path FILE)");
}

TEST_CASE(
    "agent Tools: blocking calls from worker threads, refused on the loop thread, and async calls on the "
    "loop",
    "[tools][agent]") {
  RegistryFixture f({fault_config("w")});
  auto handle = std::make_shared<ToolRegistryHandle>(*f.registry, f.bridge);
  std::mutex mu;
  std::vector<ToolCallSpan> spans;
  auto tools = make_agent_tools(handle, [&](const ToolCallSpan& s) {
    std::lock_guard lock(mu);
    spans.push_back(s);
  });

  // Worker threads block while the loop (this thread) serves them.
  std::atomic<int> done{0};
  std::vector<std::string> texts(4);
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i)
    workers.emplace_back([&, i] {
      texts[i] = tools->call("w/echo", {{"text", std::to_string(i)}}).text();
      ++done;
    });
  std::vector<ToolInfo> listed;
  workers.emplace_back([&] {
    listed = tools->list({"w/e*"});
    ++done;
  });
  run_until(f.io, [&] { return done == 5; });
  for (auto& t : workers) t.join();
  for (int i = 0; i < 4; ++i) CHECK(texts[i] == "echo: " + std::to_string(i));
  CHECK(listed.size() == 3);  // echo, exit, env
  {
    std::lock_guard lock(mu);
    CHECK(spans.size() == 4);
  }

  // On the loop thread the blocking forms would deadlock: refused.
  CHECK(error_of([&] { tools->call("w/echo", {{"text", "x"}}); }).code() == ErrorCode::bad_request);
  CHECK(error_of([&] { tools->list(); }).code() == ErrorCode::bad_request);

  // The asynchronous form awaits on the loop.
  std::optional<ToolResult> result;
  std::optional<Error> error;
  run(tools->call_async("w/echo", {{"text", "async"}}), &result, &error);
  run_until(f.io, [&] { return result || error; });
  REQUIRE(result);
  CHECK(result->text() == "echo: async");
  std::optional<std::vector<ToolInfo>> alist;
  run(tools->list_async({"w/add"}), &alist, &error);
  run_until(f.io, [&] { return alist || error; });
  REQUIRE(alist);
  CHECK(alist->size() == 1);

  // Once the handle is closed, calls fail with Error(stopping).
  handle->close();
  std::optional<Error> stopped;
  std::atomic<bool> late_done{false};  // stopped is read only after it (ThreadSanitizer)
  std::thread late([&] {
    stopped = error_of([&] { tools->call("w/echo", {{"text", "x"}}); });
    late_done = true;
  });
  run_until(f.io, [&] { return late_done.load(); });
  late.join();
  REQUIRE(stopped);
  CHECK(stopped->code() == ErrorCode::stopping);
}

TEST_CASE("close() wakes a waiting blocking call with Error(stopping), and calls after it fail at once",
          "[tools][agent]") {
  RegistryFixture f({fault_config("x")},
                    false);  // nothing drains the bridge: as after the server's run ended
  auto handle = std::make_shared<ToolRegistryHandle>(*f.registry, f.bridge);
  auto tools = make_agent_tools(handle, {});
  std::optional<Error> error;
  std::atomic<bool> calling{false};
  std::thread caller([&, tools] {
    calling = true;
    error = error_of([&] { tools->call("x/echo", {{"text", "x"}}); });
  });
  while (!calling) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // most likely waiting by now
  handle->close();
  caller.join();  // it hangs here if close() did not wake it
  REQUIRE(error);
  CHECK(error->code() == ErrorCode::stopping);
  CHECK(handle->closed());
  // After close() a blocking call returns at once (the bridge is never touched again).
  std::optional<Error> late;
  std::thread after([&, tools] { late = error_of([&] { tools->list(); }); });
  after.join();
  REQUIRE(late);
  CHECK(late->code() == ErrorCode::stopping);
}

TEST_CASE("a blocking call whose post is never run wakes with Error(stopping)", "[tools][agent]") {
  std::optional<Error> error;
  std::thread caller;
  {
    RegistryFixture f({fault_config("x")}, false);  // nothing drains the bridge
    auto handle = std::make_shared<ToolRegistryHandle>(*f.registry, f.bridge);
    auto tools = make_agent_tools(handle, {});
    std::atomic<pid_t> tid{0};
    caller = std::thread([&, tools] {
      tid = static_cast<pid_t>(::syscall(SYS_gettid));
      error = error_of([&] { tools->call("x/echo", {{"text", "x"}}); });
    });
    // Wait until the caller sleeps on its condition variable, i.e. it has posted.
    auto sleeping = [&] {
      if (tid == 0) return false;
      auto st = agentd::test::proc_stat(tid.load());  // /proc/TID/stat: a thread's own state
      return st && st->state == 'S';
    };
    run_until(f.io, sleeping);
  }  // the bridge goes with its queue: the call's completion wakes the caller
  caller.join();
  REQUIRE(error);
  CHECK(error->code() == ErrorCode::stopping);
}

TEST_CASE("the registry drives the reference server-everything over stdio", "[tools][registry][npm]") {
  const std::string node = find_node();
  if (node.empty()) {
    WARN("skipped: `node` is not on PATH (the reference MCP servers need Node.js)");
    return;
  }
  RegistryFixture f({everything_config(node)});
  kj::Vector<kj::Promise<ToolResult>> calls;
  for (int i = 0; i < 10; ++i)
    calls.add(f.registry->call("every", "echo", {{"message", std::to_string(i)}}, {}, {}));
  auto results = kj::joinPromises(calls.releaseAsArray()).wait(f.ws());
  for (int i = 0; i < 10; ++i) CHECK(results[i].text() == "Echo: " + std::to_string(i));
  auto tools = f.registry->list({"every/echo"}).wait(f.ws());
  REQUIRE(tools.size() == 1);
  CHECK(tools[0].usage.calls == 10);
  f.registry->stop(5 * kj::SECONDS).wait(f.ws());
}
