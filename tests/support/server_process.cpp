#include "server_process.h"

#include "loopback.h"
#include "ready_line.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace agentd::test {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_path(const std::string& stem) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (stem + "-XXXXXX")).string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::close(fd);
  return tmpl;
}

// Spawns as_server with stdin from /dev/null, stdout as out says, stderr appended to err_path
// (a fresh empty file from temp_path). Throws detail::SpawnError naming the binary.
detail::Subprocess spawn_server(const std::vector<std::string>& args, detail::Redirect out,
                                const std::string& err_path) {
  detail::SpawnOptions options;
  options.argv = {as_server_path()};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.in = detail::Redirect::null();
  options.out = std::move(out);
  options.err = detail::Redirect::append_to(err_path);
  return detail::Subprocess::spawn(options);
}

void fill_status(int status, ExitResult& r) {
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = -1;
    r.term_signal = WTERMSIG(status);
  }
}

}  // namespace

std::vector<std::string> standard_args(std::vector<std::string> extra) {
  return standard_args_on_port(0, std::move(extra));
}

std::vector<std::string> standard_args_on_port(std::uint16_t port, std::vector<std::string> extra) {
  std::vector<std::string> a{"--port",   std::to_string(port), "--plugin",    echo_plugin(),
                             "--plugin", test_agents_plugin(), "--log-level", "warn"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::unique_ptr<ServerProcess> restart_on(std::uint16_t port, std::vector<std::string> extra,
                                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    try {
      // Held until the new server listens, so that no other test's server is given the port
      // meanwhile; the reservation cannot be made while the killed server still listens there.
      PortReservation hold(port);
      return ServerProcess::start(standard_args_on_port(port, extra));
    } catch (const std::runtime_error&) {
      // The killed server's port may take a moment to be free.
      if (std::chrono::steady_clock::now() >= deadline) throw;
      std::this_thread::sleep_for(50ms);
    }
  }
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(5ms);
  }
}

std::uint16_t unused_port() { return PortReservation(0).port(); }

bool can_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const sockaddr_in a = loopback_address(port);
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return false;
  char state = line[close_paren + 2];
  return state != 'Z' && state != 'X';
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "agentd-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& text) const {
  std::string p = path_ + "/" + name;
  std::ofstream out(p, std::ios::binary);
  out << text;
  return p;
}

ExitResult run_as_server(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  std::string out_path = temp_path("as_server-out");
  std::string err_path = temp_path("as_server-err");
  auto process = spawn_server(args, detail::Redirect::append_to(out_path), err_path);
  ExitResult r;
  auto status = process.wait_for(timeout);
  bool done = status.has_value();
  if (!done) {
    process.signal(SIGKILL);
    status = process.wait();
  }
  fill_status(*status, r);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  if (!done) throw std::runtime_error("as_server did not exit within the deadline; stderr: " + r.err);
  return r;
}

std::unique_ptr<ServerProcess> ServerProcess::start(const std::vector<std::string>& args,
                                                    std::chrono::milliseconds timeout) {
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  p->err_path_ = temp_path("as_server-err");
  p->process_ = spawn_server(args, detail::Redirect::pipe(), p->err_path_);
  auto w = net::wait_ready_line(p->process_, timeout, &p->out_seen_);
  switch (w.outcome) {
    case net::ReadyWait::Outcome::ready:
      p->host_ = w.ready->endpoint.host;
      p->port_ = w.ready->endpoint.port;
      p->server_id_ = w.ready->server_id;
      p->ready_line_ = w.line;
      return p;
    case net::ReadyWait::Outcome::timed_out: {
      std::string err = p->stderr_text();
      p->kill_now();
      throw std::runtime_error("as_server printed no ready line in time; stderr: " + err);
    }
    case net::ReadyWait::Outcome::closed:
    case net::ReadyWait::Outcome::exited:
      break;
  }
  auto r = p->wait_exit(10s);
  throw std::runtime_error("as_server exited before it was ready (status " + std::to_string(r.exit_code) +
                           "); stderr: " + r.err);
}

ServerProcess::~ServerProcess() {
  if (process_.pid() > 0 && !exited_) kill_now();
  if (!err_path_.empty()) std::remove(err_path_.c_str());
}

Client ServerProcess::connect(ClientOptions options) const {
  return Client::connect("127.0.0.1", port_, options);
}

ExitResult ServerProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (exited_) return *exited_;
  auto status = process_.wait_for(timeout);
  if (!status)
    throw std::runtime_error("as_server (pid " + std::to_string(process_.pid()) +
                             ") did not exit within the deadline; stderr: " + stderr_text());
  ExitResult r;
  fill_status(*status, r);
  // What it printed to stdout after the ready line (the pipe is at EOF now).
  if (process_.stdout_pipe() != nullptr) {
    char chunk[512];
    ssize_t got;
    while ((got = ::read(process_.stdout_pipe().get(), chunk, sizeof chunk)) > 0)
      out_seen_.append(chunk, static_cast<std::size_t>(got));
  }
  r.out = out_seen_;
  r.err = stderr_text();
  exited_ = std::make_unique<ExitResult>(r);
  return r;
}

ExitResult ServerProcess::signal_and_wait(int sig, std::chrono::milliseconds timeout) {
  if (!exited_) process_.signal(sig);
  return wait_exit(timeout);
}

void ServerProcess::kill_now() {
  if (exited_ || process_.pid() <= 0) return;
  process_.signal(SIGKILL);
  wait_exit(30s);
}

bool ServerProcess::running() {
  if (exited_) return false;
  if (auto status = process_.try_wait()) {
    ExitResult r;
    fill_status(*status, r);
    r.err = stderr_text();
    exited_ = std::make_unique<ExitResult>(r);
    return false;
  }
  return true;
}

std::string ServerProcess::stderr_text() const { return read_file(err_path_); }

}  // namespace agentd::test
