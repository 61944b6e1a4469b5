#include "child_process.h"

#include "install_dirs.h"
#include "ready_line.h"

#include <agentd/error.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <system_error>

namespace agentd::detail {

std::string ChildProcess::find_server_binary(const std::string& configured) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!configured.empty()) return configured;
  if (const char* env = std::getenv("AGENTD_AS_SERVER"); env && *env) return env;
  std::vector<std::string> looked;
  auto found = [&](const fs::path& candidate) {
    auto normal = candidate.lexically_normal();
    if (std::find(looked.begin(), looked.end(), normal.string()) != looked.end()) return false;
    looked.push_back(normal.string());
    return ::access(normal.c_str(), X_OK) == 0 && !fs::is_directory(normal, ec);
  };
  // The bin/ of the tree libagentd was loaded from (a build tree, or an installed prefix
  // wherever it was moved to), then beside the program, then $PATH.
  if (auto lib = libagentd_dir(); !lib.empty()) {
    if (found(lib / AGENTD_LIBDIR_TO_BINDIR / "as_server")) return looked.back();
    if (found(lib / ".." / "bin" / "as_server")) return looked.back();
  }
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && found(self.parent_path() / "as_server")) return looked.back();
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "";
  while (!dirs.empty()) {
    auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (!dir.empty() && found(fs::path(dir) / "as_server")) return looked.back();
  }
  std::string places;
  for (const auto& l : looked) places += (places.empty() ? "" : ", ") + l;
  throw Error(ErrorCode::config_error,
              fmt::format("cannot find as_server: $AGENTD_AS_SERVER is not set and there is no "
                          "executable as_server at {} (beside libagentd, beside the program, "
                          "then $PATH); install it, put it on $PATH, or name it with server_path "
                          "(C++ ChildOptions::server_path, Python server_path=) or "
                          "$AGENTD_AS_SERVER",
                          places.empty() ? "any place" : places));
}

std::unique_ptr<ChildProcess> ChildProcess::start(const std::string& binary,
                                                  const std::vector<std::string>& args,
                                                  std::chrono::milliseconds timeout, bool keep_stderr) {
  SpawnOptions options;
  if (keep_stderr) options.err = Redirect::pipe();
  options.argv = {binary, "--host", "127.0.0.1", "--port", "0", "--stop-on-stdin-eof"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.in = Redirect::pipe();
  options.out = Redirect::pipe();
  std::unique_ptr<ChildProcess> child;
  try {
    child.reset(new ChildProcess(Subprocess::spawn(options)));
  } catch (const SpawnError& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("cannot start as_server '{}': {} (name the as_server binary with "
                            "server_path (C++ ChildOptions::server_path, Python server_path=) "
                            "or $AGENTD_AS_SERVER)",
                            binary, std::strerror(e.error())));
  } catch (const std::system_error& e) {
    throw Error(ErrorCode::internal, fmt::format("cannot create pipes: {}", std::strerror(e.code().value())));
  }
  Subprocess& process = child->process_;
  if (keep_stderr) {
    ChildProcess* c = child.get();
    child->stderr_copier_ = std::thread([c] { c->copy_stderr(); });
  }
  auto exited_early = [&](int status) {
    std::string tail = child->stderr_tail(20, std::chrono::seconds(1));
    return Error(ErrorCode::config_error,
                 tail.empty() ? fmt::format("as_server '{}' {} before it was ready (its reasons are on "
                                            "stderr)",
                                            binary, describe_wait_status(status))
                              : fmt::format("as_server '{}' {} before it was ready; its stderr ends:\n{}",
                                            binary, describe_wait_status(status), tail));
  };

  // Read stdout until the ready line, the child's exit, or the deadline.
  auto w = net::wait_ready_line(process, timeout);
  switch (w.outcome) {
    case net::ReadyWait::Outcome::ready: {
      child->endpoint_ = w.ready->endpoint;
      child->server_id_ = w.ready->server_id;
      ChildProcess* c = child.get();
      child->stdout_copier_ = std::thread([c] { c->copy_stdout(); });
      return child;
    }
    case net::ReadyWait::Outcome::timed_out:
      child->stop(std::chrono::seconds(2));
      throw Error(ErrorCode::timeout,
                  fmt::format("as_server '{}' printed no ready line within {} ms", binary, timeout.count()));
    case net::ReadyWait::Outcome::closed:  // stdout closed: the child is exiting
      throw exited_early(process.wait());
    case net::ReadyWait::Outcome::exited:
      break;
  }
  throw exited_early(*w.status);
}

void ChildProcess::stop(std::chrono::milliseconds grace) {
  process_.stdin_pipe() = nullptr;  // EOF first: as_server --stop-on-stdin-eof starts stopping
  process_.terminate(grace);        // a no-op once reaped
  // The copier ends at the pipe's end, or within one poll of being told to (a grandchild the
  // agents started may still hold the pipe open).
  stdout_stop_.store(true);
  if (stdout_copier_.joinable() && stdout_copier_.get_id() != std::this_thread::get_id())
    stdout_copier_.join();
  process_.stdout_pipe() = nullptr;
}

void ChildProcess::copy_stdout() {
  const int fd = process_.stdout_pipe().get();
  char buf[4096];
  while (!stdout_stop_.load()) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready <= 0) continue;  // a timeout, or EINTR: look at the stop flag again
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    for (ssize_t done = 0; done < got;) {
      const ssize_t w = ::write(STDOUT_FILENO, buf + done, static_cast<std::size_t>(got - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;  // our stdout is gone: the copy is lost, the pipe still drained
      done += w;
    }
  }
}

ChildProcess::~ChildProcess() {
  stop(std::chrono::seconds(5));
  // The child is gone, so its stderr ends (nothing else holds the pipe's write end).
  if (stderr_copier_.joinable()) stderr_copier_.join();
}

void ChildProcess::copy_stderr() {
  constexpr std::size_t kTail = 16 * 1024;  // only the end matters for a report
  const int fd = process_.stderr_pipe().get();
  char buf[4096];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    // To our stderr as it comes (a failed write loses only the copy, not the tail).
    for (ssize_t done = 0; done < got;) {
      const ssize_t w = ::write(STDERR_FILENO, buf + done, static_cast<std::size_t>(got - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      done += w;
    }
    std::lock_guard lock(tail_mu_);
    tail_.append(buf, static_cast<std::size_t>(got));
    if (tail_.size() > 2 * kTail) tail_.erase(0, tail_.size() - kTail);
  }
  std::lock_guard lock(tail_mu_);
  tail_done_ = true;
  tail_end_.notify_all();
}

std::string ChildProcess::stderr_tail(std::size_t max_lines, std::chrono::milliseconds wait) const {
  if (max_lines == 0 || !stderr_copier_.joinable()) return {};
  std::string text;
  {
    std::unique_lock lock(tail_mu_);
    tail_end_.wait_for(lock, wait, [this] { return tail_done_; });
    text = tail_;
  }
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    auto nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  std::string out;
  for (std::size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i) {
    if (!out.empty()) out += '\n';
    out += lines[i];
  }
  return out;
}

}  // namespace agentd::detail
