#include "mcp_echo.h"

#include <agentd/version.h>

#include <fmt/format.h>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <queue>
#include <stdexcept>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace agentd::bench {

namespace {

using Clock = std::chrono::steady_clock;

// The MCP versions it speaks, newest first: it agrees to the client's when it is one of these,
// else offers the newest (the client then decides whether to go on).
constexpr const char* kVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
// A line longer than this is a broken client, not a request worth buffering.
constexpr std::size_t kMaxLine = 16u << 20;

// JSON-RPC's error codes for what it refuses.
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

// Writes all of data to fd (blocking). False when the reader has gone.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

Value text_result(std::string text) {
  return Value{{"content", Value::array({Value{{"type", "text"}, {"text", std::move(text)}}})},
               {"isError", false}};
}

Value error_result(std::string text) {
  Value r = text_result(std::move(text));
  r["isError"] = true;
  return r;
}

Value tool_list() {
  Value echo = {{"name", "echo"},
                {"description", "Answers its message as one text block."},
                {"inputSchema",
                 {{"type", "object"},
                  {"properties", {{"message", {{"type", "string"}}}}},
                  {"required", Value::array({"message"})}}}};
  Value sleep = {{"name", "sleep"},
                 {"description", "Waits ms milliseconds, then answers \"slept MS ms\"."},
                 {"inputSchema",
                  {{"type", "object"},
                   {"properties", {{"ms", {{"type", "integer"}, {"minimum", 0}}}}},
                   {"required", Value::array({"ms"})}}}};
  return Value{{"tools", Value::array({std::move(echo), std::move(sleep)})}};
}

// The server: one thread, one poll loop over stdin with the earliest sleep's deadline as timeout.
// Answers made while handling a batch of input (and the sleeps due) are written together.
class EchoServer {
 public:
  int run();

 private:
  struct Sleep {
    Clock::time_point due;
    std::uint64_t seq;  // FIFO among sleeps due at the same time
    Value id;
    std::int64_t ms;
  };
  struct Later {
    bool operator()(const Sleep& a, const Sleep& b) const {
      return a.due != b.due ? a.due > b.due : a.seq > b.seq;
    }
  };

  // False for a line that is not JSON (the caller stops).
  bool handle(std::string_view line);
  void handle_request(const Value& id, const std::string& method, const Value& params);
  void call_tool(const Value& id, const Value& params);
  void answer(const Value& id, Value result);
  void fail(const Value& id, int code, std::string message);
  void answer_due_sleeps();
  int poll_timeout_ms() const;

  std::priority_queue<Sleep, std::vector<Sleep>, Later> sleeps_;
  std::uint64_t next_seq_ = 0;
  std::unordered_set<std::string> waiting_;    // id.dump() of the sleeps queued
  std::unordered_set<std::string> cancelled_;  // ... of those cancelled: dropped when due
  std::string out_;                            // answers not written yet
};

int EchoServer::run() {
  std::string in;
  std::vector<char> buf(1 << 16);
  for (;;) {
    answer_due_sleeps();
    if (!out_.empty()) {
      if (!write_all(STDOUT_FILENO, out_)) return 0;  // the client has gone
      out_.clear();
    }
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, poll_timeout_ms());
    if (ready < 0) {
      if (errno == EINTR) continue;
      fmt::print(stderr, "agentd-bench --serve-mcp-echo: poll: {}\n", std::strerror(errno));
      return 1;
    }
    if (ready == 0) continue;  // a sleep is due
    const ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
    if (n == 0) return 0;  // stdin closed: the client stops us
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fmt::print(stderr, "agentd-bench --serve-mcp-echo: read: {}\n", std::strerror(errno));
      return 1;
    }
    // Only the new bytes can hold a newline: search from where the last read ended.
    std::size_t start = 0, scan = in.size();
    in.append(buf.data(), static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = in.find('\n', scan)) != std::string::npos; scan = start = nl + 1) {
      if (!handle(std::string_view(in).substr(start, nl - start))) return 1;
    }
    in.erase(0, start);
    if (in.size() > kMaxLine) {
      fmt::print(stderr, "agentd-bench --serve-mcp-echo: a line longer than {} bytes\n", kMaxLine);
      return 1;
    }
  }
}

bool EchoServer::handle(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return true;
  Value msg = Value::parse(line, nullptr, /*allow_exceptions=*/false);
  if (msg.is_discarded() || !msg.is_object()) {
    fmt::print(stderr, "agentd-bench --serve-mcp-echo: not a JSON-RPC message: {:.200}\n", line);
    return false;
  }
  auto method = msg.find("method");
  if (method == msg.end() || !method->is_string()) return true;  // an answer to us: we ask nothing
  const std::string name = method->get<std::string>();
  const Value params = msg.value("params", Value::object());
  auto id = msg.find("id");
  if (id == msg.end()) {
    // A notification: only a cancellation changes anything (its sleep is never answered).
    if (name == "notifications/cancelled" && params.is_object() && params.contains("requestId")) {
      const std::string key = params["requestId"].dump();
      if (waiting_.count(key)) cancelled_.insert(key);
    }
    return true;
  }
  handle_request(*id, name, params);
  return true;
}

void EchoServer::handle_request(const Value& id, const std::string& method, const Value& params) {
  if (method == "initialize") {
    std::string version = kVersions[0];
    if (params.is_object() && params.contains("protocolVersion") && params["protocolVersion"].is_string()) {
      const auto asked = params["protocolVersion"].get<std::string>();
      if (std::find(std::begin(kVersions), std::end(kVersions), asked) != std::end(kVersions))
        version = asked;
    }
    answer(id, Value{{"protocolVersion", version},
                     {"capabilities", {{"tools", Value::object()}}},
                     {"serverInfo", {{"name", "agentd-bench-echo"}, {"version", AGENTD_VERSION_STRING}}}});
  } else if (method == "ping") {
    answer(id, Value::object());
  } else if (method == "tools/list") {
    answer(id, tool_list());
  } else if (method == "tools/call") {
    call_tool(id, params);
  } else {
    fail(id, kMethodNotFound, "no method " + method);
  }
}

void EchoServer::call_tool(const Value& id, const Value& params) {
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string())
    return fail(id, kInvalidParams, "tools/call needs a name");
  const std::string tool = params["name"].get<std::string>();
  const Value args = params.value("arguments", Value::object());
  if (tool == "echo") {
    if (!args.is_object() || !args.contains("message") || !args["message"].is_string())
      return answer(id, error_result("echo needs a string argument message"));
    return answer(id, text_result(args["message"].get<std::string>()));
  }
  if (tool == "sleep") {
    if (!args.is_object() || !args.contains("ms") || !args["ms"].is_number_integer() ||
        args["ms"].get<std::int64_t>() < 0)
      return answer(id, error_result("sleep needs a non-negative integer argument ms"));
    const std::int64_t ms = args["ms"].get<std::int64_t>();
    waiting_.insert(id.dump());
    sleeps_.push(Sleep{Clock::now() + std::chrono::milliseconds(ms), next_seq_++, id, ms});
    return;
  }
  fail(id, kInvalidParams, "no tool " + tool + " (echo, sleep)");
}

void EchoServer::answer(const Value& id, Value result) {
  out_ += Value{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}.dump();
  out_ += '\n';
}

void EchoServer::fail(const Value& id, int code, std::string message) {
  out_ += Value{{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", std::move(message)}}}}
              .dump();
  out_ += '\n';
}

void EchoServer::answer_due_sleeps() {
  const auto now = Clock::now();
  while (!sleeps_.empty() && sleeps_.top().due <= now) {
    const Sleep& s = sleeps_.top();
    const std::string key = s.id.dump();
    waiting_.erase(key);
    if (cancelled_.erase(key) == 0) answer(s.id, text_result(fmt::format("slept {} ms", s.ms)));
    sleeps_.pop();
  }
}

int EchoServer::poll_timeout_ms() const {
  if (sleeps_.empty()) return -1;
  const auto left = sleeps_.top().due - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Rounded up: waking before the deadline would only spin.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<std::int64_t>(ms, 1 << 30));
}

}  // namespace

int serve_mcp_echo() {
  // A client that closes our stdout while we write must not kill us with SIGPIPE: write fails
  // and we exit quietly.
  ::signal(SIGPIPE, SIG_IGN);
  EchoServer server;
  return server.run();
}

McpEchoChild::McpEchoChild(const std::string& program) {
  detail::SpawnOptions spawn;
  spawn.argv = {program, "--serve-mcp-echo"};
  spawn.in = detail::Redirect::pipe();
  spawn.out = detail::Redirect::pipe();
  process_ = detail::Subprocess::spawn(spawn);
  Value init = request("initialize", Value{{"protocolVersion", kVersions[0]},
                                           {"capabilities", Value::object()},
                                           {"clientInfo", {{"name", "agentd-bench"}, {"version", "1"}}}});
  if (init.value("protocolVersion", std::string()) != kVersions[0])
    throw std::runtime_error("the MCP echo server agreed to another version: " + init.dump());
  send(Value{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
}

McpEchoChild::~McpEchoChild() {
  process_.stdin_pipe() = nullptr;
  if (process_.pid() > 0 && !process_.wait_for(std::chrono::seconds(1)))
    process_.terminate(std::chrono::seconds(1));
}

Value McpEchoChild::request(const std::string& method, const Value& params) {
  const std::int64_t id = next_id_++;
  send(Value{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
  Value answer = read_message();
  if (answer.value("id", Value()) != Value(id))
    throw std::runtime_error("the MCP echo server answered another request: " + answer.dump());
  if (answer.contains("error"))
    throw std::runtime_error(
        fmt::format("the MCP echo server refused {}: {}", method, answer["error"].dump()));
  return answer.value("result", Value());
}

void McpEchoChild::call_echo(const std::string& message) {
  Value r = request("tools/call", Value{{"name", "echo"}, {"arguments", {{"message", message}}}});
  const Value& content = r.value("content", Value::array());
  if (r.value("isError", true) || content.size() != 1 || content[0].value("text", std::string()) != message)
    throw std::runtime_error("the MCP echo server echoed something else: " + r.dump());
}

void McpEchoChild::send(const Value& message) {
  std::string line = message.dump();
  line += '\n';
  if (!write_all(process_.stdin_pipe().get(), line))
    throw std::runtime_error(fmt::format("the MCP echo server's stdin: {}", std::strerror(errno)));
}

Value McpEchoChild::read_message() {
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      Value v = Value::parse(std::string_view(buffer_).substr(0, nl), nullptr, false);
      buffer_.erase(0, nl + 1);
      if (v.is_discarded()) throw std::runtime_error("the MCP echo server wrote something that is not JSON");
      return v;
    }
    char buf[4096];
    const ssize_t n = ::read(process_.stdout_pipe().get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("the MCP echo server closed its stdout");
    buffer_.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace agentd::bench
