// ToolRegistry: the tool servers of one as_server, each an McpSession started at first use (or
// with the registry), restarted with backoff after it dies, its tool list kept up to date.
// Servers are shared_ptrs so that a call in flight keeps the one it started on, even when a
// reconfigure replaces it meanwhile. Everything here runs on the loop thread.
#include "tool_registry.h"

#include <agentd/error.h>

#include <kj/debug.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "async_http.h"
#include "bridge.h"
#include "kj_errors.h"
#include "mcp_session.h"
#include "mcp_transport.h"
#include "task_errors.h"

namespace agentd::detail {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kFirstBackoff = std::chrono::seconds(1);
constexpr auto kMaxBackoff = std::chrono::seconds(60);
constexpr auto kBackoffReset = std::chrono::seconds(60);  // running this long forgives past deaths
constexpr auto kRetireGrace = 2 * kj::SECONDS;            // for servers a reconfigure removed

std::int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

kj::Duration to_kj(std::chrono::milliseconds ms) { return ms.count() * kj::MILLISECONDS; }

struct Counter {
  ToolUsage usage;
  std::array<std::uint64_t, kToolLatencyBounds.size()> buckets{};

  void observe(std::int64_t latency_us, bool failed) {
    ++usage.calls;
    if (failed) ++usage.failures;
    usage.latency_us_total += latency_us;
    const double seconds = static_cast<double>(latency_us) / 1e6;
    for (std::size_t i = 0; i < kToolLatencyBounds.size(); ++i)
      if (seconds <= kToolLatencyBounds[i]) ++buckets[i];
  }
};

enum class State { idle, starting, running, restarting, failed, stopped };

const char* state_name(State s) {
  switch (s) {
    case State::idle:
      return "idle";
    case State::starting:
      return "starting";
    case State::running:
      return "running";
    case State::restarting:
      return "restarting";
    case State::failed:
      return "failed";
    case State::stopped:
      return "stopped";
  }
  return "?";
}

struct Server {
  explicit Server(ToolServerConfig c) : config(std::move(c)) {}
  ToolServerConfig config;  // sessions borrow it: it lives as long as they do
  State state = State::idle;
  std::string error;
  std::uint32_t restarts = 0;
  bool ran = false;              // it was running once: the next start is a restart
  std::uint64_t generation = 0;  // of the session; events of an older one are ignored
  Clock::duration backoff{};
  Clock::time_point next_start{};
  Clock::time_point running_since{};
  kj::Own<McpSession> session;
  // While state == starting. Its continuations hold the Server weakly and the registry through
  // its `alive` flag: stop()/reconfigure()/~Impl drop it, and nothing keeps a Server alive in a cycle.
  kj::Maybe<kj::ForkedPromise<void>> starting;
  bool refreshing = false;     // a tools/list after list_changed is in flight (of this generation)
  bool refresh_again = false;  // another list_changed came meanwhile: read once more after it
  std::vector<ToolInfo> tools;
  std::string protocol_version, server_name, server_version;
};

std::string names_of(const std::vector<std::shared_ptr<Server>>& servers) {
  std::string out;
  for (const auto& s : servers) out += (out.empty() ? "" : ", ") + s->config.name;
  return out.empty() ? "none" : out;
}

}  // namespace

struct ToolRegistry::Impl {
  Impl(kj::AsyncIoContext& io_, AsyncHttp& http_, Bridge& bridge_, ToolConfig config)
      : io(io_), http(http_), bridge(bridge_), timer(io_.provider->getTimer()), source(config.source) {
    for (auto& c : config.servers) servers.push_back(std::make_shared<Server>(std::move(c)));
  }

  ~Impl() {
    *alive = false;
    tasks = nullptr;  // before the sessions: tasks may hold some
    // Start chains still held by callers elsewhere find `alive` false and the session gone.
    for (const auto& s : servers) {
      s->starting = nullptr;
      s->session = nullptr;
    }
  }

  kj::AsyncIoContext& io;
  AsyncHttp& http;
  Bridge& bridge;
  kj::Timer& timer;
  std::string source;
  std::vector<std::shared_ptr<Server>> servers;
  bool launched = false;  // start() ran
  bool stopped = false;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  // By server name, then tool name ("" for the server's total); kept across restarts.
  std::map<std::string, std::map<std::string, Counter>> counters;
  TaskErrors errors{"tool registry task"};
  kj::Own<kj::TaskSet> tasks = kj::heap<kj::TaskSet>(errors);

  std::shared_ptr<Server> find(const std::string& name) const {
    for (const auto& s : servers)
      if (s->config.name == name) return s;
    return nullptr;
  }

  // Drops a session in a later turn: never from inside its own callbacks.
  void retire(kj::Own<McpSession> session) {
    if (session.get() == nullptr) return;
    tasks->add(kj::evalLater([session = kj::mv(session)]() mutable { session = nullptr; }));
  }

  // The next start's earliest time after a death (was_running) or a failed start.
  void backoff_after_failure(Server& s, bool was_running) {
    const auto now = Clock::now();
    if (was_running && now - s.running_since >= kBackoffReset) s.backoff = {};
    s.backoff = s.backoff == Clock::duration{} ? Clock::duration(kFirstBackoff)
                                               : std::min<Clock::duration>(s.backoff * 2, kMaxBackoff);
    s.next_start = now + s.backoff;
  }

  void on_closed(const std::shared_ptr<Server>& s, std::uint64_t generation, const std::string& why) {
    if (generation != s->generation || s->state != State::running) return;  // a failed start handles itself
    spdlog::warn("tool server '{}' died: {} (started again at next use)", s->config.name, why);
    backoff_after_failure(*s, true);
    s->state = State::restarting;
    s->error = why;
    retire(kj::mv(s->session));
  }

  // One tools/list at a time per server: list_changed notifications arriving meanwhile are
  // coalesced into one more read after it (a server flooding them costs one request at a time).
  void refresh_tools(const std::shared_ptr<Server>& s, std::uint64_t generation) {
    if (generation != s->generation || s->state != State::running || s->session.get() == nullptr) return;
    if (s->refreshing) {
      s->refresh_again = true;
      return;
    }
    s->refreshing = true;
    s->refresh_again = false;
    tasks->add(s->session->list_tools()
                   .then(
                       [s, generation](std::vector<ToolInfo> tools) {
                         if (generation == s->generation) s->tools = std::move(tools);
                       },
                       [s](kj::Exception&& e) {
                         spdlog::warn("tool server '{}': reading its tools again failed: {}", s->config.name,
                                      error_from_kj(e).message());
                       })
                   .then([this, s, generation]() {
                     if (generation != s->generation) return;
                     s->refreshing = false;
                     if (s->refresh_again) refresh_tools(s, generation);
                   }));
  }

  // The server of weak if it still runs the session of `generation` (open), else the error of a
  // start or call that finds it gone meanwhile (stopped, reconfigured away, died).
  static std::shared_ptr<Server> current(const std::weak_ptr<Server>& weak, std::uint64_t generation,
                                         const std::string& name, const char* doing) {
    auto s = weak.lock();
    if (s && generation == s->generation && s->session.get() != nullptr && s->session->open()) return s;
    std::string why = "it was stopped or removed by a reload";
    if (s && s->session.get() != nullptr && !s->session->close_reason().empty())
      why = s->session->close_reason();
    else if (s && s->state != State::stopped && generation == s->generation)
      why = "its session ended";
    kj::throwFatalException(to_kj_exception(Error::retryable(
        ErrorCode::tool_error, fmt::format("tool server '{}' closed while {}: {}", name, doing, why))));
  }

  kj::Promise<void> start_now(const std::shared_ptr<Server>& s) {
    if (stopped) return to_kj_exception(Error(ErrorCode::stopping, "the server is stopping"));
    retire(kj::mv(s->session));
    if (s->ran) ++s->restarts;
    const std::uint64_t generation = ++s->generation;
    kj::Own<McpTransport> transport;
    try {
      transport = s->config.transport == ToolServerConfig::Transport::stdio
                      ? make_stdio_transport(s->config, io)
                      : make_http_transport(s->config, http, timer);
    } catch (...) {
      return to_kj_exception(std::current_exception());
    }
    s->session = kj::heap<McpSession>(s->config, kj::mv(transport), timer);
    s->refreshing = false;
    s->refresh_again = false;
    std::weak_ptr<Server> weak = s;
    s->session->on_closed([this, weak, generation, alive = alive](std::string why) {
      if (!*alive) return;
      if (auto server = weak.lock()) on_closed(server, generation, why);
    });
    s->session->on_tools_changed([this, weak, generation, alive = alive]() {
      if (!*alive) return;
      if (auto server = weak.lock()) refresh_tools(server, generation);
    });
    // Each step looks the session up again (by generation): stop() or a reload may have moved it
    // out (to shut it down, or destroyed it) between the steps.
    std::string name = s->config.name;
    return s->session->initialize()
        .then([weak, generation, name]() {
          return current(weak, generation, name, "starting")->session->list_tools();
        })
        .then([weak, generation, name](std::vector<ToolInfo> tools) {
          auto s = current(weak, generation, name, "starting");
          s->tools = std::move(tools);
          s->protocol_version = s->session->protocol_version();
          s->server_name = s->session->server_name();
          s->server_version = s->session->server_version();
        });
  }

  // Resolves when s runs (starting it if needed); rejects with Error(tool_error) when it cannot.
  kj::Promise<void> ensure_started(const std::shared_ptr<Server>& s) {
    if (stopped || s->state == State::stopped)
      return to_kj_exception(Error(ErrorCode::stopping,
                                   fmt::format("tool server '{}': the server is stopping", s->config.name)));
    if (s->state == State::running && s->session.get() != nullptr && s->session->open()) return kj::READY_NOW;
    if (s->state == State::starting) {
      KJ_IF_MAYBE (fork, s->starting) {
        return fork->addBranch();
      }
    }
    // Within the backoff after a failed start or a death: refused at once (retryable), saying when
    // the next start is due, rather than holding the call through the backoff.
    const auto now = Clock::now();
    if ((s->state == State::failed || s->state == State::restarting) && now < s->next_start) {
      const auto wait_s = std::chrono::duration_cast<std::chrono::seconds>(s->next_start - now).count() + 1;
      return to_kj_exception(Error::retryable(
          ErrorCode::tool_error,
          s->state == State::failed
              ? fmt::format("tool server '{}' could not start: {} (next try in {} s)", s->config.name,
                            s->error, wait_s)
              : fmt::format("tool server '{}' died: {} (it starts again at the next use in {} s)",
                            s->config.name, s->error, wait_s)));
    }
    s->state = State::starting;
    std::weak_ptr<Server> weak = s;
    std::string name = s->config.name;
    auto started = start_now(s).then(
        [weak]() {
          auto s = weak.lock();
          if (!s || s->state != State::starting) return;  // stopped meanwhile: start_now's checks threw
          s->state = State::running;
          s->ran = true;
          s->running_since = Clock::now();
          spdlog::info("tool server '{}' runs ({} tools, MCP {})", s->config.name, s->tools.size(),
                       s->protocol_version);
        },
        [this, weak, alive = alive](kj::Exception&& e) {
          auto s = weak.lock();
          if (!*alive || !s || s->state != State::starting || stopped) kj::throwFatalException(kj::mv(e));
          Error err = error_from_kj(e);
          backoff_after_failure(*s, false);
          s->state = State::failed;
          s->error = err.message();
          retire(kj::mv(s->session));
          spdlog::warn("{}", err.message());
          kj::throwFatalException(to_kj_exception(Error::retryable(ErrorCode::tool_error, err.message())));
        });
    auto fork = started.fork();
    auto branch = fork.addBranch();
    s->starting = kj::mv(fork);
    return branch;
  }

  ToolServerInfo info_of(const Server& s) const {
    ToolServerInfo info;
    info.name = s.config.name;
    info.transport = s.config.transport == ToolServerConfig::Transport::stdio ? "stdio" : "http";
    info.state = state_name(s.state);
    info.error = s.error;
    info.protocol_version = s.protocol_version;
    info.server_name = s.server_name;
    info.server_version = s.server_version;
    info.restarts = s.restarts;
    info.tools = with_usage(s.tools);
    if (auto it = counters.find(s.config.name); it != counters.end())
      if (auto t = it->second.find(""); t != it->second.end()) info.usage = t->second.usage;
    return info;
  }

  std::vector<ToolInfo> with_usage(std::vector<ToolInfo> tools) const {
    for (auto& t : tools) {
      auto it = counters.find(t.server);
      if (it == counters.end()) continue;
      if (auto c = it->second.find(t.name); c != it->second.end()) t.usage = c->second.usage;
    }
    return tools;
  }

  void count(const std::string& server, const std::string& tool, std::int64_t latency_us, bool failed) {
    auto& per_server = counters[server];
    if (!tool.empty()) per_server[tool].observe(latency_us, failed);  // empty: the total only
    per_server[""].observe(latency_us, failed);
  }
};

ToolRegistry::ToolRegistry(kj::AsyncIoContext& io, AsyncHttp& http, Bridge& bridge, ToolConfig config)
    : impl_(kj::heap<Impl>(io, http, bridge, std::move(config))) {}

ToolRegistry::~ToolRegistry() = default;

void ToolRegistry::start() {
  Impl& r = *impl_;
  r.launched = true;
  for (const auto& s : r.servers)
    if (s->config.start_at_launch && s->state == State::idle)
      r.tasks->add(r.ensure_started(s).catch_([](kj::Exception&&) {}));  // logged and shown in servers()
}

void ToolRegistry::reconfigure(ToolConfig config) {
  Impl& r = *impl_;
  std::vector<std::shared_ptr<Server>> next;
  for (auto& c : config.servers) {
    auto old = r.find(c.name);
    if (old && old->config.same_server(c)) {
      old->config.where = c.where;
      next.push_back(old);
    } else {
      next.push_back(std::make_shared<Server>(std::move(c)));
    }
  }
  for (const auto& old : r.servers) {
    if (std::find(next.begin(), next.end(), old) != next.end()) continue;
    old->state = State::stopped;
    ++old->generation;
    if (old->session.get() != nullptr) {
      McpSession& session = *old->session;
      r.tasks->add(session.shut_down(kRetireGrace).attach(kj::mv(old->session), old));
    }
    old->starting = nullptr;  // a start under way: its next step finds the server stopped
  }
  r.servers = std::move(next);
  r.source = config.source;
  if (r.launched) start();
}

kj::Promise<std::vector<ToolServerInfo>> ToolRegistry::servers(bool start) {
  Impl& r = *impl_;
  auto build = [this]() {
    std::vector<ToolServerInfo> out;
    for (const auto& s : impl_->servers) out.push_back(impl_->info_of(*s));
    return out;
  };
  if (!start) return build();
  kj::Vector<kj::Promise<void>> starts;
  for (const auto& s : r.servers) starts.add(r.ensure_started(s).catch_([](kj::Exception&&) {}));
  return kj::joinPromises(starts.releaseAsArray()).then(kj::mv(build));
}

kj::Promise<std::vector<ToolInfo>> ToolRegistry::list(std::vector<std::string> patterns) {
  Impl& r = *impl_;
  kj::Vector<kj::Promise<std::vector<ToolInfo>>> lists;
  for (const auto& s : r.servers) {
    lists.add(r.ensure_started(s).then([s]() { return s->tools; }).catch_([s](kj::Exception&& e) {
      spdlog::debug("tool server '{}' left out of the tool list: {}", s->config.name,
                    error_from_kj(e).message());
      return std::vector<ToolInfo>();
    }));
  }
  return kj::joinPromises(lists.releaseAsArray())
      .then([this, patterns = std::move(patterns)](kj::Array<std::vector<ToolInfo>> all) {
        std::vector<ToolInfo> out;
        for (auto& tools : all)
          for (auto& t : tools) {
            const std::string q = t.qualified_name();
            bool match = patterns.empty() ||
                         std::any_of(patterns.begin(), patterns.end(),
                                     [&](const std::string& p) { return tool_name_matches(p, q); });
            if (match) out.push_back(std::move(t));
          }
        std::sort(out.begin(), out.end(), [](const ToolInfo& a, const ToolInfo& b) {
          return a.qualified_name() < b.qualified_name();
        });
        return impl_->with_usage(std::move(out));
      });
}

kj::Promise<ToolResult> ToolRegistry::call(std::string server, std::string tool, Value arguments,
                                           ToolCallOptions options,
                                           std::function<void(const ToolCallSpan&)> record) {
  Impl& r = *impl_;
  const std::int64_t start_ns = unix_now_ns();
  const auto t0 = Clock::now();
  // What the call's steps share: whether it was finished (counted, recorded) and whether the
  // tool turned out to be unknown (then counted only in the server's total: callers choose the
  // names, and a row per made-up name would grow without bound).
  struct CallState {
    bool finished = false;
    bool unknown_tool = false;
  };
  auto state = std::make_shared<CallState>();
  auto finish = [this, server, tool, start_ns, t0, record, state, alive = r.alive](
                    const char* outcome, const std::string& message) {
    if (state->finished) return;
    state->finished = true;
    const auto elapsed = Clock::now() - t0;
    const bool failed = std::string_view(outcome) != "ok";
    if (*alive && (impl_->find(server) != nullptr))
      impl_->count(server, state->unknown_tool ? std::string() : tool,
                   std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count(), failed);
    if (record) {
      ToolCallSpan span;
      span.tool = server + "/" + tool;
      span.start_unix_ns = start_ns;
      span.duration_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
      span.outcome = outcome;
      span.error_message = message;
      record(span);
    }
  };
  auto s = r.find(server);
  if (!s) {
    Error e(ErrorCode::tool_error,
            r.servers.empty()
                ? fmt::format("no tool server named '{}': this server has no tool servers (as_server "
                              "--tool-config-path FILE configures them)",
                              server)
                : fmt::format("no tool server named '{}' (configured: {})", server, names_of(r.servers)));
    finish("tool_error", e.message());
    return to_kj_exception(e);
  }
  if (r.stopped) {
    Error e(ErrorCode::stopping, "the server is stopping: no more tool calls");
    finish("stopping", e.message());
    return to_kj_exception(e);
  }
  const kj::Duration timeout = to_kj(options.timeout.value_or(s->config.call_timeout));
  // A caller that drops the promise (a cancelled agent, a registry going away) still gets the
  // call counted and its span recorded, as "cancelled" (not recorded once the registry is gone:
  // what `record` leads to may be going too).
  auto on_drop = kj::defer([finish, state, alive = r.alive]() mutable {
    if (state->finished) return;
    if (*alive)
      finish("cancelled", "the caller stopped waiting for the answer");
    else
      state->finished = true;
  });
  return r.ensure_started(s)
      .then([s, state, tool, arguments = std::move(arguments), timeout]() mutable {
        bool known =
            std::any_of(s->tools.begin(), s->tools.end(), [&](const ToolInfo& t) { return t.name == tool; });
        if (!known) {
          state->unknown_tool = true;
          std::string names;
          for (const auto& t : s->tools) names += (names.empty() ? "" : ", ") + t.name;
          return kj::Promise<ToolResult>(to_kj_exception(
              Error(ErrorCode::tool_error,
                    fmt::format("tool server '{}' has no tool '{}'{} (its tools: {})", s->config.name, tool,
                                s->config.allow_tools.empty() ? "" : " allowed by its config",
                                names.empty() ? "none" : names))));
        }
        // Between the start and this turn the server may have died, been stopped or reloaded
        // away (its session moved out): refuse (retryable) instead of touching a session that
        // is not there.
        if (s->state != State::running || s->session.get() == nullptr || !s->session->open()) {
          std::string why = s->state == State::stopped ? "it was stopped or removed by a reload"
                            : s->session.get() != nullptr && !s->session->close_reason().empty()
                                ? s->session->close_reason()
                            : s->error.empty() ? "its session ended"
                                               : s->error;
          return kj::Promise<ToolResult>(to_kj_exception(
              Error::retryable(ErrorCode::tool_error,
                               fmt::format("tool server '{}' closed before the call to '{}' was sent: {}",
                                           s->config.name, tool, why))));
        }
        return s->session->call_tool(tool, arguments, timeout);
      })
      .then(
          [finish](ToolResult result) mutable {
            finish(result.is_error ? "is_error" : "ok", result.is_error ? result.text().substr(0, 500) : "");
            return result;
          },
          [finish](kj::Exception&& e) mutable -> ToolResult {
            Error err = error_from_kj(e);
            finish(std::string(to_string(err.code())).c_str(), err.message());
            kj::throwFatalException(kj::mv(e));
          })
      .attach(kj::mv(on_drop));
}

kj::Promise<void> ToolRegistry::stop(kj::Duration grace) {
  Impl& r = *impl_;
  r.stopped = true;
  kj::Vector<kj::Promise<void>> ends;
  for (const auto& s : r.servers) {
    s->state = State::stopped;
    ++s->generation;
    s->starting = nullptr;
    if (s->session.get() == nullptr) continue;
    McpSession& session = *s->session;
    ends.add(session.shut_down(grace).attach(kj::mv(s->session), s).catch_([s](kj::Exception&& e) {
      spdlog::warn("tool server '{}' did not shut down cleanly: {}", s->config.name,
                   error_from_kj(e).message());
    }));
  }
  return kj::joinPromises(ends.releaseAsArray());
}

std::vector<ToolMetrics> ToolRegistry::metrics() const {
  std::vector<ToolMetrics> out;
  for (const auto& [server, tools] : impl_->counters)
    for (const auto& [tool, c] : tools) out.push_back({server, tool, c.usage, c.buckets});
  return out;
}

std::size_t ToolRegistry::in_flight() const {
  std::size_t n = 0;
  for (const auto& s : impl_->servers)
    if (s->session.get() != nullptr) n += s->session->in_flight();
  return n;
}

std::size_t ToolRegistry::size() const { return impl_->servers.size(); }

void ToolRegistry::add_task(kj::Promise<void> task) { impl_->tasks->add(kj::mv(task)); }

}  // namespace agentd::detail
