// McpSession: JSON-RPC 2.0 requests and their answers matched by id, over one McpTransport.
// Each request is a kj promise fed by a fulfiller kept in pending_ until its answer comes; the
// promise carries a guard that, when the caller drops it first, forgets the request and tells the
// server (notifications/cancelled). Nothing here blocks or owns a thread.
#include "mcp_session.h"

#include <agentd/error.h>
#include <agentd/version.h>

#include <kj/debug.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kj_errors.h"
#include "log_limit.h"

namespace agentd::detail {

namespace {

// Pages of tools/list followed at most: a server whose cursors never end is cut off there.
constexpr int kMaxToolPages = 1000;
// Tools kept of one server at most: the rest of a longer list is left out (with a warning).
constexpr std::size_t kMaxTools = 10000;

std::string seconds_text(kj::Duration d) {
  const auto ms = d / kj::MILLISECONDS;
  if (ms % 1000 == 0) return fmt::format("{} s", ms / 1000);
  return fmt::format("{:.3g} s", static_cast<double>(ms) / 1000.0);
}

std::string string_field(const Value& v, const char* key) {
  if (!v.is_object()) return {};
  auto it = v.find(key);
  return it != v.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

struct McpSession::Impl {
  struct Pending {
    std::string what;  // "tools/call 'echo'", for messages
    kj::Own<kj::PromiseFulfiller<Value>> fulfiller;
    bool cancellable;  // initialize is never cancelled (the spec forbids it)
  };

  const ToolServerConfig& config;
  kj::Own<McpTransport> transport;
  kj::Timer& timer;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);  // false once Impl is going
  bool open = false;
  bool started = false;
  std::int64_t next_id = 1;
  std::unordered_map<std::int64_t, Pending> pending;
  std::string protocol_version;
  std::string server_name;
  std::string server_version;
  std::string close_reason;  // why the transport closed (or the session shut down), once it did
  std::function<void()> tools_changed;
  std::function<void(std::string)> closed;
  LogLimit log_limit;

  Impl(const ToolServerConfig& c, kj::Own<McpTransport> t, kj::Timer& tm)
      : config(c), transport(kj::mv(t)), timer(tm) {}

  // For continuations that find the session gone (alive false): `config` may be gone too.
  static Error ended_error() {
    return Error::retryable(ErrorCode::tool_error, "the tool server's session ended");
  }

  ~Impl() {
    *alive = false;
    fail_pending(Error::retryable(ErrorCode::tool_error,
                                  fmt::format("tool server '{}': its session ended", config.name)));
  }

  void fail_pending(const Error& e) {
    auto all = std::move(pending);
    pending.clear();
    for (auto& [id, p] : all) p.fulfiller->reject(to_kj_exception(e));
  }

  void send(Value message) {
    message["jsonrpc"] = "2.0";
    transport->send(message);
  }

  // Forgets request id if it is still pending, and tells the server to stop working on it.
  void cancel(std::int64_t id, const std::string& reason) {
    auto it = pending.find(id);
    if (it == pending.end()) return;
    bool tell = it->second.cancellable && open;
    pending.erase(it);
    if (tell)
      send({{"method", "notifications/cancelled"}, {"params", {{"requestId", id}, {"reason", reason}}}});
    // Streamable HTTP: the request's own POST (and its event stream) is no longer wanted either.
    if (open) transport->abandon(Value(id));
  }

  // One request: resolves with its result; rejects with Error(tool_error) for an error answer or a
  // closed transport, and with make_timeout() once `timeout` passes.
  kj::Promise<Value> request(std::string method, Value params, std::string what, kj::Duration timeout,
                             std::function<Error()> make_timeout, bool cancellable = true) {
    if (!open)
      return to_kj_exception(Error::retryable(
          ErrorCode::tool_error,
          fmt::format("tool server '{}' is not connected ({} not sent)", config.name, what)));
    const std::int64_t id = next_id++;
    auto paf = kj::newPromiseAndFulfiller<Value>();
    pending.emplace(id, Pending{what, kj::mv(paf.fulfiller), cancellable});
    Value message = {{"id", id}, {"method", method}};
    if (!params.is_null()) message["params"] = std::move(params);
    send(std::move(message));
    // The guard runs when the caller's promise goes: answered (nothing to do), dropped, or timed
    // out (exclusiveJoin drops the answer's branch as soon as the timer fires).
    const kj::TimePoint deadline = timer.now() + timeout;
    auto guard = kj::defer([this, id, alive = alive, deadline, timeout]() {
      if (!*alive) return;
      cancel(id, timer.now() >= deadline ? fmt::format("no answer within {}", seconds_text(timeout))
                                         : std::string("the caller no longer waits for it"));
    });
    auto expiry = timer.atTime(deadline).then([make_timeout = std::move(make_timeout)]() -> Value {
      kj::throwFatalException(to_kj_exception(make_timeout()));
    });
    return paf.promise.attach(kj::mv(guard)).exclusiveJoin(kj::mv(expiry));
  }

  void on_message(Value message) {
    if (message.is_array()) {  // a JSON-RPC batch (2025-03-26 allowed them)
      for (auto& m : message) {
        if (!*alive || !open) return;
        on_message(std::move(m));
      }
      return;
    }
    if (!message.is_object()) return;
    auto method = message.find("method");
    auto id = message.find("id");
    if (method != message.end()) {
      if (id != message.end()) {
        on_request(method->is_string() ? method->get<std::string>() : std::string(), *id);
      } else if (method->is_string()) {
        on_notification(method->get<std::string>(), message.value("params", Value()));
      }
      return;
    }
    if (id == message.end() || !id->is_number_integer()) {
      spdlog::debug("tool server '{}' sent a message that answers no request: {}", config.name,
                    message.dump(-1, ' ', false, Value::error_handler_t::replace).substr(0, 200));
      return;
    }
    auto it = pending.find(id->get<std::int64_t>());
    if (it == pending.end()) return;  // answered after we gave up on it: dropped
    Pending p = std::move(it->second);
    pending.erase(it);
    if (auto err = message.find("error"); err != message.end()) {
      std::string text = string_field(*err, "message");
      std::string code = err->is_object() && err->contains("code") ? err->at("code").dump() : "?";
      p.fulfiller->reject(
          to_kj_exception(Error(ErrorCode::tool_error,
                                fmt::format("tool server '{}' refused {}: {} (JSON-RPC error {})",
                                            config.name, p.what, text.empty() ? "no message" : text, code))));
      return;
    }
    auto result = message.find("result");
    p.fulfiller->fulfill(result != message.end() ? std::move(*result) : Value::object());
  }

  // We implement no client features, so the only request we serve is ping.
  void on_request(const std::string& method, const Value& id) {
    if (method == "ping") {
      send({{"id", id}, {"result", Value::object()}});
      return;
    }
    send({{"id", id},
          {"error",
           {{"code", -32601},
            {"message",
             fmt::format("Method not found: agentd's MCP client does not implement '{}'", method)}}}});
  }

  void on_notification(const std::string& method, const Value& params) {
    if (method == "notifications/tools/list_changed") {
      if (tools_changed) tools_changed();
    } else if (method == "notifications/message") {
      if (log_limit.allow(config.name))
        spdlog::info("tool server '{}' logs: {}", config.name,
                     params.dump(-1, ' ', false, Value::error_handler_t::replace).substr(0, 1000));
    }
    // Others (progress, resources, cancelled for requests we never make) have nothing to do here.
  }

  void on_closed(std::string why) {
    if (!open && !started) return;
    open = false;
    started = false;
    if (close_reason.empty()) close_reason = why;
    fail_pending(Error::retryable(ErrorCode::tool_error,
                                  fmt::format("tool server '{}' is gone: {}", config.name, why)));
    if (closed) closed(std::move(why));
  }

  ToolInfo parse_tool(const Value& t) const {
    ToolInfo info;
    info.server = config.name;
    info.name = string_field(t, "name");
    info.title = string_field(t, "title");
    info.description = string_field(t, "description");
    if (auto s = t.find("inputSchema"); s != t.end() && s->is_object()) info.input_schema = *s;
    if (auto s = t.find("outputSchema"); s != t.end() && s->is_object()) info.output_schema = *s;
    if (auto a = t.find("annotations"); a != t.end() && a->is_object()) {
      info.annotations = *a;
      if (info.title.empty()) info.title = string_field(*a, "title");
    }
    return info;
  }

  bool allowed(const std::string& tool) const {
    if (config.allow_tools.empty()) return true;
    for (const auto& pattern : config.allow_tools)
      if (tool_name_matches(pattern, tool)) return true;
    return false;
  }

  kj::Promise<std::vector<ToolInfo>> list_page(kj::Own<std::vector<ToolInfo>> acc, std::string cursor,
                                               int page) {
    Value params = Value::object();
    if (!cursor.empty()) params["cursor"] = cursor;
    const kj::Duration timeout = config.call_timeout.count() * kj::MILLISECONDS;
    auto name = config.name;
    return request("tools/list", std::move(params), "tools/list", timeout,
                   [name, timeout] {
                     return Error(ErrorCode::timeout,
                                  fmt::format("tool server '{}': tools/list got no answer within {}", name,
                                              seconds_text(timeout)));
                   })
        .then([this, alive = alive, acc = kj::mv(acc),
               page](Value result) mutable -> kj::Promise<std::vector<ToolInfo>> {
          // The answer may have come just before the session went (its continuation still queued).
          if (!*alive) return to_kj_exception(ended_error());
          auto tools = result.find("tools");
          if (tools == result.end() || !tools->is_array())
            return to_kj_exception(
                Error(ErrorCode::tool_error,
                      fmt::format("tool server '{}' answered tools/list without a tools list", config.name)));
          for (const auto& t : *tools) {
            ToolInfo info = parse_tool(t);
            if (info.name.empty()) {
              spdlog::warn("tool server '{}' lists a tool without a name: left out", config.name);
              continue;
            }
            if (!allowed(info.name)) continue;
            if (acc->size() >= kMaxTools) {
              spdlog::warn("tool server '{}' lists more than {} tools: the rest is left out", config.name,
                           kMaxTools);
              return kj::mv(*acc);
            }
            acc->push_back(std::move(info));
          }
          std::string next = string_field(result, "nextCursor");
          if (next.empty()) return kj::mv(*acc);
          if (page + 1 >= kMaxToolPages) {
            spdlog::warn("tool server '{}': tools/list still had more after {} pages: the rest is left out",
                         config.name, kMaxToolPages);
            return kj::mv(*acc);
          }
          return list_page(kj::mv(acc), std::move(next), page + 1);
        });
  }
};

McpSession::McpSession(const ToolServerConfig& config, kj::Own<McpTransport> transport, kj::Timer& timer)
    : impl_(kj::heap<Impl>(config, kj::mv(transport), timer)) {}

McpSession::~McpSession() = default;

kj::Promise<void> McpSession::initialize() {
  Impl& s = *impl_;
  McpTransport::Events events;
  events.message = [&s](Value m) { s.on_message(std::move(m)); };
  events.closed = [&s](std::string why) { s.on_closed(std::move(why)); };
  try {
    s.transport->start(std::move(events));
  } catch (...) {
    return to_kj_exception(std::current_exception());
  }
  s.open = true;
  s.started = true;
  Value params = {{"protocolVersion", kProtocolVersions[0]},
                  {"capabilities", Value::object()},
                  {"clientInfo", {{"name", "agentd"}, {"version", AGENTD_VERSION_STRING}}}};
  const kj::Duration timeout = s.config.start_timeout.count() * kj::MILLISECONDS;
  auto name = s.config.name;
  return s
      .request(
          "initialize", std::move(params), "initialize", timeout,
          [name, timeout] {
            return Error::retryable(
                ErrorCode::tool_error,
                fmt::format("tool server '{}' did not answer initialize within {} (start_timeout)", name,
                            seconds_text(timeout)));
          },
          false)
      .then([&s, alive = s.alive](Value result) {
        // initialize's answer may have come just before the session went: nothing to touch then.
        if (!*alive) kj::throwFatalException(to_kj_exception(Impl::ended_error()));
        std::string version = string_field(result, "protocolVersion");
        bool known = false;
        for (const char* v : kProtocolVersions) known = known || version == v;
        if (!known) {
          std::string ours;
          for (const char* v : kProtocolVersions) ours += (ours.empty() ? "" : ", ") + std::string(v);
          kj::throwFatalException(to_kj_exception(Error(
              ErrorCode::tool_error,
              fmt::format("tool server '{}' speaks MCP version '{}'; agentd asked for {} and accepts {}",
                          s.config.name, version, kProtocolVersions[0], ours))));
        }
        s.protocol_version = version;
        if (auto info = result.find("serverInfo"); info != result.end()) {
          s.server_name = string_field(*info, "name");
          s.server_version = string_field(*info, "version");
        }
        s.transport->set_protocol_version(version);
        s.send({{"method", "notifications/initialized"}});
      });
}

kj::Promise<std::vector<ToolInfo>> McpSession::list_tools() {
  return impl_->list_page(kj::heap<std::vector<ToolInfo>>(), {}, 0);
}

kj::Promise<ToolResult> McpSession::call_tool(const std::string& tool, const Value& arguments,
                                              kj::Duration timeout) {
  Impl& s = *impl_;
  std::string what = fmt::format("tools/call '{}'", tool);
  auto name = s.config.name;
  return s
      .request("tools/call",
               {{"name", tool}, {"arguments", arguments.is_null() ? Value::object() : arguments}}, what,
               timeout,
               [name, what, timeout] {
                 return Error(
                     ErrorCode::timeout,
                     fmt::format("tool server '{}': {} got no answer within {} (it was told to cancel it)",
                                 name, what, seconds_text(timeout)));
               })
      .then([name, what](Value result) {
        try {
          return ToolResult::from_value(result);
        } catch (const Error& e) {
          kj::throwFatalException(to_kj_exception(Error(
              ErrorCode::tool_error,
              fmt::format("tool server '{}' answered {} with no result: {}", name, what, e.message()))));
        }
      });
}

kj::Promise<void> McpSession::ping(kj::Duration timeout) {
  auto name = impl_->config.name;
  return impl_
      ->request("ping", Value(), "ping", timeout,
                [name, timeout] {
                  return Error(ErrorCode::timeout,
                               fmt::format("tool server '{}' did not answer ping within {}", name,
                                           seconds_text(timeout)));
                })
      .ignoreResult();
}

void McpSession::on_tools_changed(std::function<void()> fn) { impl_->tools_changed = std::move(fn); }
void McpSession::on_closed(std::function<void(std::string why)> fn) { impl_->closed = std::move(fn); }

bool McpSession::open() const { return impl_->open; }
const std::string& McpSession::protocol_version() const { return impl_->protocol_version; }
const std::string& McpSession::server_name() const { return impl_->server_name; }
const std::string& McpSession::server_version() const { return impl_->server_version; }
std::size_t McpSession::in_flight() const { return impl_->pending.size(); }
McpTransport& McpSession::transport() { return *impl_->transport; }
const std::string& McpSession::close_reason() const { return impl_->close_reason; }

kj::Promise<void> McpSession::shut_down(kj::Duration grace) {
  Impl& s = *impl_;
  // Calls still waiting fail now (retryable: the next session may answer them); the transport
  // then ends politely. Its closed event comes after: nothing is pending by then.
  if (s.open || s.started) {
    s.open = false;
    if (s.close_reason.empty()) s.close_reason = "shut down";
    s.fail_pending(Error::retryable(ErrorCode::tool_error,
                                    fmt::format("tool server '{}' is shutting down", s.config.name)));
  }
  return s.transport->shut_down(grace);
}

}  // namespace agentd::detail
