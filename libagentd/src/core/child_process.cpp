#include "child_process.h"

#include <agentd/error.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <thread>

extern char** environ;

namespace agentd::detail {

namespace {
constexpr const char* kReadyPrefix = "as_server ready: listening on ";

std::string exit_description(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "stopped";
}
}  // namespace

bool split_host_port(std::string_view address, std::string& host, std::uint16_t& port) {
  auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  auto digits = address.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || end != digits.data() + digits.size() || value == 0 || value > 65535)
    return false;
  host = std::string(address.substr(0, colon));
  port = static_cast<std::uint16_t>(value);
  return true;
}

bool parse_ready_line(const std::string& line, std::string& host, std::uint16_t& port,
                      std::string& server_id) {
  auto at = line.find(kReadyPrefix);
  if (at == std::string::npos) return false;
  std::string rest = line.substr(at + std::strlen(kReadyPrefix));
  auto space = rest.find(' ');
  if (!split_host_port(rest.substr(0, space), host, port)) return false;
  auto sid = rest.find("server_id=");
  if (sid != std::string::npos) {
    auto end = rest.find(' ', sid);
    server_id = rest.substr(sid + 10, end == std::string::npos ? std::string::npos : end - sid - 10);
  }
  return true;
}

std::string ChildProcess::find_server_binary(const std::string& configured) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!configured.empty()) return configured;
  if (const char* env = std::getenv("AGENTD_AS_SERVER"); env && *env) return env;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto beside = self.parent_path() / "as_server";
    if (fs::exists(beside, ec)) return beside.string();
  }
  fs::path installed = fs::path(AGENTD_INSTALL_BINDIR) / "as_server";
  if (fs::exists(installed, ec)) return installed.string();
  return "as_server";  // $PATH
}

std::unique_ptr<ChildProcess> ChildProcess::start(const std::string& binary,
                                                  const std::vector<std::string>& args,
                                                  std::chrono::milliseconds timeout) {
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0)
    throw Error(ErrorCode::internal, fmt::format("cannot create pipes: {}", std::strerror(errno)));

  std::vector<std::string> argv_s{binary, "--host", "127.0.0.1", "--port", "0",
                                  "--stop-on-stdin-eof"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  pid_t pid = -1;
  int rc = binary.find('/') == std::string::npos
               ? ::posix_spawnp(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ)
               : ::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (rc != 0) {
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    throw Error(ErrorCode::config_error,
                fmt::format("cannot start as_server '{}': {} (set ChildOptions::server_path or "
                            "$AGENTD_AS_SERVER to the as_server binary)",
                            binary, std::strerror(rc)));
  }
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->stdin_fd_ = in_pipe[1];
  child->stdout_fd_ = out_pipe[0];

  // Read stdout until the ready line, the child's exit, or the deadline.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string buf;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      child->stop(std::chrono::seconds(2));
      throw Error(ErrorCode::timeout,
                  fmt::format("as_server '{}' printed no ready line within {} ms", binary,
                              timeout.count()));
    }
    pollfd pfd{child->stdout_fd_, POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 100)));
    if (n < 0 && errno != EINTR)
      throw Error(ErrorCode::internal, fmt::format("poll: {}", std::strerror(errno)));
    if (n > 0) {
      char chunk[512];
      ssize_t got = ::read(child->stdout_fd_, chunk, sizeof chunk);
      if (got > 0) buf.append(chunk, static_cast<std::size_t>(got));
      std::size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        if (parse_ready_line(line, child->host_, child->port_, child->server_id_)) return child;
      }
      if (got <= 0) {
        // stdout closed: the child is exiting.
        int status = 0;
        ::waitpid(pid, &status, 0);
        child->pid_ = -1;
        throw Error(ErrorCode::config_error,
                    fmt::format("as_server '{}' {} before it was ready (its reasons are on stderr)",
                                binary, exit_description(status)));
      }
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      child->pid_ = -1;
      throw Error(ErrorCode::config_error,
                  fmt::format("as_server '{}' {} before it was ready (its reasons are on stderr)",
                              binary, exit_description(status)));
    }
  }
}

void ChildProcess::stop(std::chrono::milliseconds grace) {
  if (stdin_fd_ >= 0) {
    ::close(stdin_fd_);
    stdin_fd_ = -1;
  }
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + grace;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
  }
  if (stdout_fd_ >= 0) {
    ::close(stdout_fd_);
    stdout_fd_ = -1;
  }
}

ChildProcess::~ChildProcess() { stop(std::chrono::seconds(5)); }

}  // namespace agentd::detail
