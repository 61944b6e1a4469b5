// The stdio MCP transport: the tool server is a child process (core/subprocess, its own process
// group, killed if as_server's loop thread goes); JSON-RPC messages are lines on its stdin and
// stdout, read and written through the loop (kj's wrapInputFd/wrapOutputFd: no threads).
// stderr lines go to the log. Every buffer is bounded: stdout by max_message_bytes (a longer
// line closes the transport), stderr lines are cut at kStderrLineCap.
#include "mcp_transport.h"

#include <agentd/error.h>

#include <kj/async-unix.h>
#include <kj/debug.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kj_errors.h"
#include "log_limit.h"
#include "subprocess.h"
#include "task_errors.h"

namespace agentd::detail {

namespace {

constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::size_t kStderrLineCap = 4096;  // longer stderr lines are cut (and marked)
// After its stdout closed: how long to wait for the child's exit status before calling it
// "closed its stdout" (and killing it).
constexpr auto kExitWait = 2 * kj::SECONDS;
constexpr auto kPollInterval = 5 * kj::MILLISECONDS;
// Bytes waiting to be written to its stdin at most (beyond one message of max_message_bytes): a
// server that sends requests (each answered) but never reads its stdin is cut off there.
constexpr std::size_t kMaxQueuedBytes = 16u << 20;

// program (no '/') on the colon-separated dirs, or empty.
std::string find_program(const std::string& program, const std::string& dirs) {
  std::size_t start = 0;
  for (;;) {
    std::size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty()) {
      std::string file = dir + "/" + program;
      struct stat st {};
      if (::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(file.c_str(), X_OK) == 0)
        return file;
    }
    if (end == std::string::npos) return {};
    start = end + 1;
  }
}

std::string shorten(std::string_view text, std::size_t cap = 200) {
  if (text.size() <= cap) return std::string(text);
  return std::string(text.substr(0, cap)) + "...";
}

class StdioTransport final : public McpTransport {
 public:
  StdioTransport(const ToolServerConfig& config, kj::AsyncIoContext& io)
      : config_(config), io_(io), timer_(io.provider->getTimer()) {}

  ~StdioTransport() noexcept override {
    // Whatever still runs of it goes now: the background reads and writes first (they use the
    // pipes), then the whole group, then the reap (Subprocess's destructor).
    writer_ = nullptr;
    tasks_ = nullptr;
    out_ = nullptr;
    in_ = nullptr;
    err_ = nullptr;
    child_.signal_group(SIGKILL);
  }

  void start(Events events) override {
    events_ = std::move(events);
    SpawnOptions options;
    std::vector<std::string> env;
    std::string path;
    for (const auto& [k, v] : config_.env) {
      env.push_back(k + "=" + v);
      if (k == "PATH") path = v;
    }
    if (path.empty() && std::none_of(config_.env.begin(), config_.env.end(),
                                     [](const auto& kv) { return kv.first == "PATH"; })) {
      path = kDefaultPath;
      env.push_back(std::string("PATH=") + kDefaultPath);
    }
    if (config_.argv.empty())
      throw Error(ErrorCode::tool_error, fmt::format("tool server '{}' has no command", config_.name));
    options.argv = config_.argv;
    // A bare program name is looked up on the child's PATH (the one it will run with), so the
    // config decides what runs, not as_server's environment.
    if (options.argv[0].find('/') == std::string::npos) {
      std::string file = find_program(options.argv[0], path);
      if (file.empty())
        throw Error(
            ErrorCode::tool_error,
            fmt::format("tool server '{}': cannot start '{}': not found on PATH {} (give the full path, or "
                        "PATH in its env)",
                        config_.name, options.argv[0], path));
      options.argv[0] = file;
    }
    options.env = std::move(env);
    options.cwd = config_.cwd;
    options.in = Redirect::pipe();
    options.out = Redirect::pipe();
    options.err = Redirect::pipe();
    options.die_with_parent = true;
    options.clear_signal_mask = true;
    try {
      child_ = Subprocess::spawn(options);
    } catch (const SpawnError& e) {
      throw Error(ErrorCode::tool_error, fmt::format("tool server '{}': {}", config_.name, e.what()));
    } catch (const std::exception& e) {
      throw Error(ErrorCode::tool_error,
                  fmt::format("tool server '{}': cannot start: {}", config_.name, e.what()));
    }
    using Flags = kj::LowLevelAsyncIoProvider;
    const uint flags = Flags::TAKE_OWNERSHIP;
    in_ = io_.lowLevelProvider->wrapOutputFd(child_.stdin_pipe().release(), flags);
    out_ = io_.lowLevelProvider->wrapInputFd(child_.stdout_pipe().release(), flags);
    err_ = io_.lowLevelProvider->wrapInputFd(child_.stderr_pipe().release(), flags);
    tasks_ = kj::heap<kj::TaskSet>(errors_);
    writer_ = kj::heap<kj::TaskSet>(errors_);
    tasks_->add(read_stdout().catch_([this](kj::Exception&& e) {
      close(fmt::format("cannot read its stdout: {}", e.getDescription().cStr()));
    }));
    tasks_->add(read_stderr());
  }

  void send(const Value& message) override {
    if (closed_ || overflowed_ || in_.get() == nullptr || writer_.get() == nullptr) return;
    std::string line = message.dump(-1, ' ', false, Value::error_handler_t::replace);
    line += '\n';
    queued_bytes_ += line.size();
    queue_.push_back(std::move(line));
    if (queued_bytes_ > kMaxQueuedBytes + config_.max_message_bytes) {
      // It does not read what we write. Closed in a later turn: the sender (a session request,
      // an answer to one of its requests) must not see its own callbacks run under it.
      overflowed_ = true;
      std::string why = fmt::format("it does not read its stdin ({} bytes were waiting to be written to it)",
                                    queued_bytes_);
      queue_.clear();
      queued_bytes_ = 0;
      tasks_->add(kj::evalLater([this, why = std::move(why)]() mutable { close(std::move(why)); }));
      return;
    }
    if (!writing_) {
      writing_ = true;
      writer_->add(write_next());
    }
  }

  kj::Promise<void> shut_down(kj::Duration grace) override {
    if (child_.pid() <= 0) return kj::READY_NOW;
    shutting_down_ = true;
    // EOF on its stdin asks it to exit (the MCP way); then SIGTERM and SIGKILL to the group.
    // The writer goes before the stream it writes to (a write may be under way).
    writer_ = nullptr;
    writing_ = false;
    queue_.clear();
    queued_bytes_ = 0;
    in_ = nullptr;
    return wait_exit(grace / 2)
        .then([this, grace](bool exited) -> kj::Promise<bool> {
          if (exited) return true;
          child_.signal_group(SIGTERM);
          return wait_exit(grace / 2);
        })
        .then([this](bool exited) {
          // Also when it exited: what it started (npx -> node) may still run in its group.
          child_.signal_group(SIGKILL);
          if (!exited) child_.wait();
          close(fmt::format("shut down ({})", describe_wait_status(child_.status().value_or(0))));
        });
  }

  int pid() const override { return child_.pid() > 0 && !child_.reaped() ? child_.pid() : 0; }

 private:
  // Resolves true once the child exited (reaped), false when `limit` passed first.
  kj::Promise<bool> wait_exit(kj::Duration limit) {
    if (child_.try_wait()) return true;
    if (limit <= 0 * kj::SECONDS) return false;
    kj::Duration step = limit < kPollInterval ? limit : kPollInterval;
    return timer_.afterDelay(step).then([this, limit, step]() { return wait_exit(limit - step); });
  }

  kj::Promise<void> read_stdout() {
    return out_->tryRead(chunk_, 1, sizeof chunk_).then([this](size_t n) -> kj::Promise<void> {
      if (closed_) return kj::READY_NOW;
      if (n == 0) return stdout_ended();
      std::string_view data(chunk_, n);
      while (!data.empty()) {
        std::size_t nl = data.find('\n');
        std::string_view piece = nl == std::string_view::npos ? data : data.substr(0, nl);
        if (line_.size() + piece.size() > config_.max_message_bytes) {
          close(fmt::format(
              "it sent a message longer than max_message_bytes ({} bytes): the transport was closed",
              config_.max_message_bytes));
          return kj::READY_NOW;
        }
        line_.append(piece);
        if (nl == std::string_view::npos) break;
        data.remove_prefix(nl + 1);
        std::string line = std::exchange(line_, std::string());
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;  // a blank line: nothing
        Value message = Value::parse(line, nullptr, false);
        if (message.is_discarded() || !(message.is_object() || message.is_array())) {
          close(fmt::format(
              "it wrote a line on stdout that is not a JSON-RPC message (a stdio MCP server may only "
              "write messages there; logs go to stderr): {}",
              shorten(line)));
          return kj::READY_NOW;
        }
        if (events_.message) events_.message(std::move(message));
        if (closed_) return kj::READY_NOW;  // the handler may have closed it
      }
      return read_stdout();
    });
  }

  // Its stdout closed: it exited (or is about to), or it closed the stream and runs on.
  kj::Promise<void> stdout_ended() {
    return wait_exit(shutting_down_ ? 0 * kj::SECONDS : kExitWait).then([this](bool exited) {
      if (closed_) return;
      std::string why = exited ? describe_wait_status(*child_.status()) : "closed its stdout";
      if (!last_stderr_.empty()) why += "; its last stderr line: " + last_stderr_;
      close(why);
    });
  }

  kj::Promise<void> read_stderr() {
    return err_->tryRead(err_chunk_, 1, sizeof err_chunk_).then([this](size_t n) -> kj::Promise<void> {
      if (n == 0) {
        if (!err_line_.empty()) log_stderr(std::exchange(err_line_, std::string()));
        return kj::READY_NOW;
      }
      std::string_view data(err_chunk_, n);
      while (!data.empty()) {
        std::size_t nl = data.find('\n');
        std::string_view piece = nl == std::string_view::npos ? data : data.substr(0, nl);
        if (!err_skipping_) {
          std::size_t room = kStderrLineCap - err_line_.size();
          err_line_.append(piece.substr(0, room));
          if (piece.size() > room) {
            log_stderr(std::exchange(err_line_, std::string()) + " [cut]");
            err_skipping_ = true;
          }
        }
        if (nl == std::string_view::npos) break;
        data.remove_prefix(nl + 1);
        if (err_skipping_)
          err_skipping_ = false;
        else
          log_stderr(std::exchange(err_line_, std::string()));
      }
      return read_stderr();
    });
  }

  void log_stderr(std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) return;
    last_stderr_ = shorten(line);
    if (log_limit_.allow(config_.name)) spdlog::info("tool server '{}': {}", config_.name, line);
  }

  kj::Promise<void> write_next() {
    if (queue_.empty() || in_.get() == nullptr || closed_) {
      writing_ = false;
      return kj::READY_NOW;
    }
    auto line = kj::heap<std::string>(std::move(queue_.front()));
    queue_.pop_front();
    queued_bytes_ -= std::min(queued_bytes_, line->size());
    auto& text = *line;
    return in_->write(text.data(), text.size())
        .attach(kj::mv(line))
        .then([this]() { return write_next(); },
              [this](kj::Exception&& e) {
                writing_ = false;
                if (!shutting_down_)
                  close(fmt::format("cannot write to its stdin: {}", e.getDescription().cStr()));
              });
  }

  void close(std::string why) {
    if (closed_) return;
    closed_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    if (events_.closed) events_.closed(std::move(why));
  }

  const ToolServerConfig& config_;
  kj::AsyncIoContext& io_;
  kj::Timer& timer_;
  Events events_;
  Subprocess child_;
  kj::Own<kj::AsyncOutputStream> in_;  // its stdin
  kj::Own<kj::AsyncInputStream> out_;  // its stdout
  kj::Own<kj::AsyncInputStream> err_;  // its stderr
  std::deque<std::string> queue_;      // lines waiting to be written, in order
  std::size_t queued_bytes_ = 0;       // their size (at most kMaxQueuedBytes + max_message_bytes)
  bool writing_ = false;
  bool overflowed_ = false;  // the queue went over its cap: closing
  bool closed_ = false;
  bool shutting_down_ = false;
  std::string line_;  // the stdout line read so far (at most max_message_bytes)
  std::string err_line_;
  bool err_skipping_ = false;  // the rest of a cut stderr line is dropped
  std::string last_stderr_;
  LogLimit log_limit_;
  char chunk_[kReadChunk];
  char err_chunk_[4096];
  TaskErrors errors_{"stdio tool server transport"};
  kj::Own<kj::TaskSet> tasks_;   // the reads (and a deferred close)
  kj::Own<kj::TaskSet> writer_;  // write_next's chain: cancelled before in_ goes; last, so it goes first
};

}  // namespace

kj::Own<McpTransport> make_stdio_transport(const ToolServerConfig& config, kj::AsyncIoContext& io) {
  return kj::heap<StdioTransport>(config, io);
}

}  // namespace agentd::detail
