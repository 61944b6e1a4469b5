// The Tools agents get (Agent::tools()): the registry's list and call from any thread.
// Blocking forms (worker threads) post the call to the loop through the bridge and wait on a
// condition variable; a Completion object travels with the posted function and then with the
// promise, and whoever destroys it unfinished (a post dropped unrun, a registry going away with
// the call in flight) wakes the waiter with Error(stopping). The waiter is also registered with
// the handle, whose close() wakes it with Error(stopping) at once: after close() nothing drives
// the loop any more (the server's run ended), so no waiter may depend on it. Asynchronous forms
// await the registry's promise on the loop itself (detail::await_kj).
#include <agentd/error.h>
#include <agentd/tool.h>

#include <kj/common.h>

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "bridge.h"
#include "kj_await.h"
#include "kj_errors.h"
#include "tool_registry.h"

namespace agentd::detail {

namespace {

Error no_tool_servers(const std::string& name) {
  return Error(
      ErrorCode::tool_error,
      fmt::format(
          "no tool server named '{}': this server has no tool servers (as_server --tool-config-path FILE)",
          name.substr(0, name.find('/'))));
}

Error stopping() { return Error(ErrorCode::stopping, "the server is stopping: its tool servers are gone"); }

// "SERVER/TOOL" split at the first '/'.
std::pair<std::string, std::string> split_name(const std::string& name) {
  auto slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size())
    throw Error(ErrorCode::tool_error,
                fmt::format("a tool is named SERVER/TOOL (\"fs/read_file\"), not '{}'", name));
  return {name.substr(0, slash), name.substr(slash + 1)};
}

// What a waiting worker thread and the loop share.
template <typename T>
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<T> value;
  std::exception_ptr error;

  // The first outcome wins; later ones (the loop's answer after close() woke the waiter) are dropped.
  void finish(std::optional<T> v, std::exception_ptr e) {
    std::lock_guard lock(mu);
    if (done) return;
    value = std::move(v);
    error = std::move(e);
    done = true;
    cv.notify_all();
  }
};

// Hands the outcome to the waiter exactly once; unfinished at destruction: Error(stopping).
template <typename T>
class Completion {
 public:
  explicit Completion(std::shared_ptr<Waiter<T>> w) : w_(std::move(w)) {}
  ~Completion() {
    if (w_) finish({}, std::make_exception_ptr(stopping()));
  }
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  void finish(std::optional<T> value, std::exception_ptr error) {
    auto w = std::move(w_);
    if (w) w->finish(std::move(value), std::move(error));
  }

 private:
  std::shared_ptr<Waiter<T>> w_;
};

// Runs start(registry) on the loop and waits for its promise. Not on the loop thread.
template <typename T, typename Start>
T run_blocking_on_loop(const std::shared_ptr<ToolRegistryHandle>& handle, const char* what, Start start) {
  if (handle->on_loop_thread())
    throw Error(ErrorCode::bad_request,
                fmt::format("Tools::{} waits for the answer, which would block the server's event loop: an "
                            "asynchronous agent uses {}_async",
                            what, what));
  auto waiter = std::make_shared<Waiter<T>>();
  const std::uint64_t id =
      handle->add_waiter([waiter] { waiter->finish(std::nullopt, std::make_exception_ptr(stopping())); });
  if (id == 0) throw stopping();  // closed: the loop may never run what we would post
  auto unregister = kj::defer([&handle, id] { handle->remove_waiter(id); });
  auto completion = std::make_unique<Completion<T>>(waiter);
  // Dropped unrun when the handle closed meanwhile: the completion then wakes us (stopping).
  handle->post([handle, completion = std::move(completion), start = std::move(start)]() mutable {
    ToolRegistry* registry = handle->registry();
    if (registry == nullptr) return;  // completion goes unfinished: stopping
    kj::Promise<T> promise = nullptr;
    try {
      promise = start(*registry);
    } catch (...) {
      completion->finish({}, std::current_exception());
      return;
    }
    Completion<T>* c = completion.get();
    registry->add_task(
        promise
            .then([c](T value) { c->finish(std::move(value), nullptr); },
                  [c](kj::Exception&& e) { c->finish({}, std::make_exception_ptr(error_from_kj(e))); })
            .attach(kj::mv(completion)));
  });
  std::unique_lock lock(waiter->mu);
  waiter->cv.wait(lock, [&] { return waiter->done; });
  if (waiter->error) std::rethrow_exception(waiter->error);
  return std::move(*waiter->value);
}

ToolRegistry& registry_on_loop(const std::shared_ptr<ToolRegistryHandle>& handle, const char* what) {
  if (!handle->on_loop_thread())
    throw Error(
        ErrorCode::bad_request,
        fmt::format("Tools::{}_async runs on the server's event-loop thread (asynchronous agents); blocking "
                    "agents use {}",
                    what, what));
  ToolRegistry* registry = handle->registry();
  if (registry == nullptr) throw stopping();
  return *registry;
}

// Free coroutines: they hold what they use by value, not through a Tools object that may go first.
Task<std::vector<ToolInfo>> list_on_loop(std::shared_ptr<ToolRegistryHandle> handle,
                                         std::vector<std::string> patterns) {
  if (!handle) co_return std::vector<ToolInfo>();
  ToolRegistry& registry = registry_on_loop(handle, "list");
  co_return co_await await_kj(registry.list(std::move(patterns)));
}

Task<ToolResult> call_on_loop(std::shared_ptr<ToolRegistryHandle> handle,
                              std::function<void(const ToolCallSpan&)> record, std::string name,
                              Value arguments, ToolCallOptions options) {
  if (!handle) throw no_tool_servers(name);
  auto [server, tool] = split_name(name);
  ToolRegistry& registry = registry_on_loop(handle, "call");
  co_return co_await await_kj(
      registry.call(std::move(server), std::move(tool), std::move(arguments), options, std::move(record)));
}

class AgentTools final : public Tools {
 public:
  AgentTools(std::shared_ptr<ToolRegistryHandle> handle, std::function<void(const ToolCallSpan&)> record)
      : handle_(std::move(handle)), record_(std::move(record)) {}

  std::vector<ToolInfo> list(const std::vector<std::string>& patterns) override {
    if (!handle_) return {};
    return run_blocking_on_loop<std::vector<ToolInfo>>(
        handle_, "list", [patterns](ToolRegistry& r) { return r.list(patterns); });
  }

  ToolResult call(const std::string& name, const Value& arguments, const ToolCallOptions& options) override {
    if (!handle_) throw no_tool_servers(name);
    auto [server, tool] = split_name(name);
    return run_blocking_on_loop<ToolResult>(
        handle_, "call",
        [server = std::move(server), tool = std::move(tool), arguments, options,
         record = record_](ToolRegistry& r) { return r.call(server, tool, arguments, options, record); });
  }

  Task<std::vector<ToolInfo>> list_async(std::vector<std::string> patterns) override {
    return list_on_loop(handle_, std::move(patterns));
  }

  Task<ToolResult> call_async(std::string name, Value arguments, ToolCallOptions options) override {
    return call_on_loop(handle_, record_, std::move(name), std::move(arguments), options);
  }

 private:
  std::shared_ptr<ToolRegistryHandle> handle_;  // null: no tool servers configured
  std::function<void(const ToolCallSpan&)> record_;
};

}  // namespace

void ToolRegistryHandle::close() {
  registry_.store(nullptr);
  std::lock_guard lock(mu_);
  bridge_ = nullptr;
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& [id, wake] : waiters) wake();
}

bool ToolRegistryHandle::post(kj::Function<void()> fn) {
  std::unique_lock lock(mu_);
  if (bridge_ == nullptr) {
    lock.unlock();  // fn's captures may wake a waiter: not under our lock
    return false;
  }
  bridge_->post(kj::mv(fn));
  return true;
}

std::uint64_t ToolRegistryHandle::add_waiter(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  if (bridge_ == nullptr) return 0;
  const std::uint64_t id = next_waiter_++;
  waiters_.emplace(id, std::move(wake));
  return id;
}

void ToolRegistryHandle::remove_waiter(std::uint64_t id) {
  std::lock_guard lock(mu_);
  waiters_.erase(id);
}

bool ToolRegistryHandle::closed() const {
  std::lock_guard lock(mu_);
  return bridge_ == nullptr;
}

std::shared_ptr<Tools> make_agent_tools(std::shared_ptr<ToolRegistryHandle> registry,
                                        std::function<void(const ToolCallSpan&)> record) {
  return std::make_shared<AgentTools>(std::move(registry), std::move(record));
}

}  // namespace agentd::detail
