// ToolRegistry: the tool servers of one as_server (its --tool-config-path), shared by all its
// agents; and the Tools handle each agent gets (agentd/tool.h).
//
// Lifecycle of a server: "idle" until first use (or started with the registry when its config
// says start: at_start); "starting" while its transport starts and initialize runs; "running";
// when it dies, its in-flight calls fail with Error(tool_error, retryable) and it is
// "restarting": the next start waits a backoff (1 s, doubling to 60 s; reset after a minute
// running) and happens at the next use; "failed" when a start failed (the next use after the
// backoff tries again); "stopped" once stop() ran. The tool list is read at start and again on
// notifications/tools/list_changed.
//
// Metrics per server and tool: calls, failures, latency (a histogram).
//
// Threading: the registry lives on the server's loop thread (construct, call, destroy there).
// The Tools handles are thread-safe: blocking calls from workers go to the loop through the
// bridge and wait; asynchronous calls (on the loop) await directly.
#pragma once

#include <agentd/tool.h>

#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/function.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tool_config.h"

namespace agentd::detail {

class AsyncHttp;
class Bridge;

// Latency buckets of tool calls (upper bounds, seconds), as in /metrics.
inline constexpr std::array<double, 14> kToolLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                              0.1,    0.25,  0.5,    1,     2.5,  10,    60};

// One tool's (or one server's) counters, for /metrics.
struct ToolMetrics {
  std::string server;
  std::string tool;  // empty: the server's total
  ToolUsage usage;
  // Calls that took at most each bound (cumulative, as Prometheus histograms count).
  std::array<std::uint64_t, kToolLatencyBounds.size()> buckets{};
};

class ToolRegistry {
 public:
  // io, http and bridge are borrowed and outlive the registry; the bridge leads into io's loop.
  ToolRegistry(kj::AsyncIoContext& io, AsyncHttp& http, Bridge& bridge, ToolConfig config);
  ~ToolRegistry();  // kills what still runs (stop() first for a polite end)

  // Starts the servers whose config says start: at_start (in the background; failures are
  // logged and shown in servers()).
  void start();

  // Replaces the configuration (SIGHUP, agentctl reload): servers removed or changed are shut
  // down (their in-flight calls fail with tool_error, retryable) and changed ones start again at
  // next use (or at once with start: at_start); unchanged ones keep running.
  void reconfigure(ToolConfig config);

  // The servers, in config order. start: start those not running and wait for each (up to its
  // start_timeout) so their tools are listed; a failure shows as state "failed" with its error.
  kj::Promise<std::vector<ToolServerInfo>> servers(bool start);

  // The tools matching patterns (all when empty), sorted by qualified name; servers started as
  // needed; servers that cannot start are left out.
  kj::Promise<std::vector<ToolInfo>> list(std::vector<std::string> patterns);

  // Calls server/tool. Error(tool_error) for an unknown server or tool (naming the known ones),
  // a server that cannot start; what McpSession::call_tool rejects with otherwise. The call is
  // counted in metrics(); `record` (optional) gets its span (also when it fails).
  kj::Promise<ToolResult> call(std::string server, std::string tool, Value arguments, ToolCallOptions options,
                               std::function<void(const ToolCallSpan&)> record = {});

  // Shuts every server down (stdio: stdin closed, then signals; at most `grace` each, in
  // parallel). Later calls fail with Error(stopping).
  kj::Promise<void> stop(kj::Duration grace);

  // Counters for /metrics: a row per tool called so far and per server. Loop thread.
  std::vector<ToolMetrics> metrics() const;

  // Calls in flight now, over all servers (bench and tests).
  std::size_t in_flight() const;

  std::size_t size() const;  // configured servers

  // Loop thread: keeps task running until it settles or the registry goes (then it is cancelled).
  // For work started on the loop on behalf of another thread (make_agent_tools' blocking calls).
  void add_task(kj::Promise<void> task);

 private:
  struct Impl;
  kj::Own<Impl> impl_;
};

// The Tools an agent gets (Agent::tools()): calls go to `registry` on its loop (through bridge
// from other threads); each call's span goes to `record` (any thread; may be empty).
// The handle stays valid after the registry is gone: its calls then fail with Error(stopping).
// `alive` is the registry's liveness flag (ToolRegistryHandle below).
class ToolRegistryHandle;
std::shared_ptr<Tools> make_agent_tools(std::shared_ptr<ToolRegistryHandle> registry,
                                        std::function<void(const ToolCallSpan&)> record);

// What agent handles hold: the registry while it exists, and the bridge to its loop. The server
// creates one with the registry and calls close() before destroying either.
// close() is final: calls made after it fail with Error(stopping) at once (nothing is posted, the
// bridge is never touched again), and blocking calls waiting at that moment wake with
// Error(stopping) (whatever their posted work does later is ignored).
class ToolRegistryHandle {
 public:
  // Constructed on the registry's loop thread.
  ToolRegistryHandle(ToolRegistry& registry, Bridge& bridge)
      : registry_(&registry), loop_thread_(std::this_thread::get_id()), bridge_(&bridge) {}
  // Loop thread: the registry is going away (see above).
  void close();
  ToolRegistry* registry() const { return registry_.load(); }  // loop thread use only
  // Any thread: hands fn to the loop through the bridge; false (fn dropped unrun) once closed.
  bool post(kj::Function<void()> fn);
  // Any thread: registers wake, which close() calls once (under the handle's lock: it must only
  // signal). Returns its id for remove_waiter, or 0 when already closed (wake not kept).
  std::uint64_t add_waiter(std::function<void()> wake);
  void remove_waiter(std::uint64_t id);
  bool closed() const;
  // Whether the caller runs on the registry's loop thread (where blocking on it would deadlock).
  bool on_loop_thread() const { return std::this_thread::get_id() == loop_thread_; }

 private:
  std::atomic<ToolRegistry*> registry_;
  std::thread::id loop_thread_;
  mutable std::mutex mu_;
  Bridge* bridge_;  // guarded by mu_; null once closed
  std::uint64_t next_waiter_ = 1;
  std::map<std::uint64_t, std::function<void()>> waiters_;  // guarded by mu_
};

}  // namespace agentd::detail
