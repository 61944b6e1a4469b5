#include "local_servers.h"

#include "child_process.h"  // ChildProcess::find_server_binary
#include "ready_line.h"     // parse_ready_line

#include <agentd/value_limits.h>
#include "subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <kj/io.h>
#include <fmt/format.h>

namespace agentctl {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

void write_file_atomically(const std::string& path, const std::string& text) {
  auto tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) throw LocalError(fmt::format("cannot write {}", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw LocalError(fmt::format("cannot write {}: {}", path, ec.message()));
}

namespace {

// How often startup and shutdown are re-checked. These loops wait on a condition (ready line,
// process gone) with a deadline; the interval only bounds the latency of noticing it.
constexpr auto kPollInterval = std::chrono::milliseconds(20);

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tail_lines(const std::string& text, int n) {
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  while (n-- > 0 && pos != std::string::npos && pos > 0) pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos || pos == 0 ? text : text.substr(pos + 1);
}

// Running, not a zombie, and still the program we started (guards against pid reuse).
bool is_alive(const LocalServer& s) {
  if (s.pid <= 0) return false;
  if (::kill(s.pid, 0) != 0 && errno == ESRCH) return false;
  auto stat = read_file(fmt::format("/proc/{}/stat", s.pid));
  auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  char state = stat[paren + 2];
  if (state == 'Z' || state == 'X') return false;
  auto cmdline = read_file(fmt::format("/proc/{}/cmdline", s.pid));
  return cmdline.substr(0, cmdline.find('\0')) == s.binary;
}

// The wait status as text, with what as_server's own exit codes mean.
std::string describe_status(int status) {
  auto text = agentd::detail::describe_wait_status(status);
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    text += code == 2   ? " (bad configuration)"
            : code == 3 ? " (cannot listen)"
            : code == 4 ? " (plugin error)"
                        : "";
  }
  return text;
}

// The exclusive lock on the state directory, held for its lifetime.
class StateLock {
 public:
  explicit StateLock(const std::string& dir) {
    auto path = dir + "/lock";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) fd_ = kj::AutoCloseFd(fd);  // closed however the constructor ends
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0)
      throw LocalError(fmt::format("cannot lock {}: {}", path, std::strerror(errno)));
  }
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

 private:
  kj::AutoCloseFd fd_;  // the lock goes with it
};

std::string state_file(const std::string& dir) { return dir + "/servers.json"; }

std::vector<LocalServer> load_state(const std::string& dir) {
  std::vector<LocalServer> out;
  auto text = read_file(state_file(dir));
  if (text.empty()) return out;
  auto v = agentd::parse_value(text).value;
  if (v.is_discarded() || !v.contains("servers"))
    throw LocalError(
        fmt::format("{} is not an agentctl state file; remove it if no servers "
                    "started by `agentctl up` are running",
                    state_file(dir)));
  for (const auto& s : v["servers"]) out.push_back(LocalServer::from_json(s));
  return out;
}

void save_state(const std::string& dir, const std::vector<LocalServer>& servers) {
  auto path = state_file(dir);
  if (servers.empty()) {
    std::error_code ec;
    fs::remove(path, ec);
    return;
  }
  agentd::Value v = {{"servers", agentd::Value::array()}};
  for (const auto& s : servers) v["servers"].push_back(s.to_json());
  write_file_atomically(path, v.dump(2) + "\n");
}

// The environment for a detached server: ours without the service-manager variables (a server
// started from inside a systemd unit must not notify that unit's socket).
std::vector<std::string> child_environment() {
  auto env = agentd::detail::current_environment();
  std::erase_if(env, [](std::string_view kv) {
    return kv.starts_with("NOTIFY_SOCKET=") || kv.starts_with("WATCHDOG_USEC=") ||
           kv.starts_with("WATCHDOG_PID=") || kv.starts_with("LISTEN_FDS=") || kv.starts_with("LISTEN_PID=");
  });
  return env;
}

struct Starting {
  LocalServer server;
  agentd::detail::Subprocess process;  // released once every server is ready
  bool ready = false;
};

// hint: how to name another binary, for the error.
agentd::detail::Subprocess spawn_detached(const std::string& binary, const std::vector<std::string>& args,
                                          const std::string& log_path, const std::string& hint) {
  agentd::detail::SpawnOptions options;
  options.argv = {binary};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = child_environment();
  options.in = agentd::detail::Redirect::null();
  options.out = agentd::detail::Redirect::append_to(log_path);
  options.err = agentd::detail::Redirect::to_stdout();
  // Its own session: the server outlives this agentctl and ignores the terminal's ^C.
  options.new_session = true;
  options.clear_signal_mask = true;
  try {
    return agentd::detail::Subprocess::spawn(options);
  } catch (const agentd::detail::SpawnError& e) {
    throw LocalError(fmt::format("cannot start '{}': {} ({})", binary, std::strerror(e.error()), hint));
  }
}

void terminate_and_reap(agentd::detail::Subprocess& process) {
  process.signal(SIGTERM);
  process.wait();
}

// An address the gateway can reach a server listening on host at: a wildcard address is
// reached over loopback.
std::string reachable_address(const LocalServer& s) {
  const std::string host = s.host == "0.0.0.0"                  ? "127.0.0.1"
                           : s.host == "::" || s.host == "[::]" ? "::1"
                                                                : s.host;
  return fmt::format("{}:{}", host, s.port);
}

// The arguments of agentd-gateway in front of servers: what it listens on, its upstream, the
// token the servers want (their --auth-token-file among extra_args), then the caller's own.
std::vector<std::string> gateway_args(const UpOptions& opts, const std::vector<LocalServer>& servers) {
  std::vector<std::string> args{"--listen", opts.gateway_listen};
  std::string upstream;
  for (const auto& s : servers) upstream += (upstream.empty() ? "" : ",") + reachable_address(s);
  args.insert(args.end(), {servers.size() == 1 ? "--server" : "--cluster", upstream});
  const auto& extra = opts.extra_args;
  for (std::size_t i = 0; i < extra.size(); ++i) {
    if (extra[i] == "--auth-token-file" && i + 1 < extra.size())
      args.insert(args.end(), {"--upstream-token-file", extra[i + 1]});
    else if (extra[i].rfind("--auth-token-file=", 0) == 0)
      args.insert(args.end(), {"--upstream-token-file", extra[i].substr(std::strlen("--auth-token-file="))});
  }
  args.insert(args.end(), opts.gateway_extra_args.begin(), opts.gateway_extra_args.end());
  return args;
}

// The gateway's ready line ("agentd-gateway ready: listening on HOST:PORT ... url=URL"): its
// port and URL into s; false when line is not one.
bool parse_gateway_ready_line(const std::string& line, LocalServer& s) {
  static const std::string kMarker = "agentd-gateway ready: listening on ";
  const auto at = line.find(kMarker);
  if (at == std::string::npos) return false;
  std::istringstream words(line.substr(at + kMarker.size()));
  std::string address;
  words >> address;
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  try {
    s.port = static_cast<std::uint16_t>(std::stoul(address.substr(colon + 1)));
  } catch (const std::exception&) {
    return false;
  }
  for (std::string w; words >> w;)
    if (w.rfind("url=", 0) == 0) s.url = w.substr(4);
  if (s.url.empty()) s.url = "http://" + address;
  return true;
}

}  // namespace

std::string LocalServer::address() const { return fmt::format("{}:{}", host, port); }

agentd::Value LocalServer::to_json() const {
  if (kind == kGateway)
    return {{"kind", kind},    {"pid", pid},           {"host", host},
            {"port", port},    {"address", address()}, {"url", url},
            {"log", log_path}, {"binary", binary},     {"started_at", started_at}};
  return {{"pid", pid},
          {"host", host},
          {"port", port},
          {"address", address()},
          {"server_id", server_id},
          {"log", log_path},
          {"binary", binary},
          {"started_at", started_at}};
}

LocalServer LocalServer::from_json(const agentd::Value& v) {
  LocalServer s;
  s.kind = v.value("kind", std::string(kServer));
  s.url = v.value("url", std::string{});
  s.pid = v.value("pid", 0);
  s.host = v.value("host", std::string{});
  s.port = v.value("port", std::uint16_t{0});
  s.server_id = v.value("server_id", std::string{});
  s.log_path = v.value("log", std::string{});
  s.binary = v.value("binary", std::string{});
  s.started_at = v.value("started_at", std::int64_t{0});
  return s;
}

std::string state_dir() {
  std::string dir;
  if (const char* d = std::getenv("AGENTD_STATE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) {
    dir = std::string(x) + "/agentd";
  } else {
    dir = fmt::format("/tmp/agentd-{}", ::getuid());
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw LocalError(
        fmt::format("cannot create state directory {}: {} (set $AGENTD_STATE_DIR "
                    "to a writable directory)",
                    dir, std::strerror(errno)));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid())
    throw LocalError(
        fmt::format("state directory {} is not a directory owned by you (set "
                    "$AGENTD_STATE_DIR to one that is)",
                    dir));
  return dir;
}

std::string find_gateway_binary(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* env = std::getenv("AGENTD_GATEWAY"); env && *env) return env;
  std::vector<std::string> looked;
  auto found = [&](const fs::path& candidate) {
    std::error_code ec;
    looked.push_back(candidate.lexically_normal().string());
    return ::access(looked.back().c_str(), X_OK) == 0 && !fs::is_directory(looked.back(), ec);
  };
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && found(self.parent_path() / "agentd-gateway")) return looked.back();
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "";
  while (!dirs.empty()) {
    auto colon = dirs.find(':');
    std::string d(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (!d.empty() && found(fs::path(d) / "agentd-gateway")) return looked.back();
  }
  std::string places;
  for (const auto& l : looked) places += (places.empty() ? "" : ", ") + l;
  if (places.empty()) places = "no place";
  throw LocalError(
      fmt::format("cannot find agentd-gateway: $AGENTD_GATEWAY is not set and there is no "
                  "executable agentd-gateway beside agentctl or on $PATH (looked at {}); "
                  "install it, put it on $PATH, or name it with --gateway-path or "
                  "$AGENTD_GATEWAY",
                  places));
}

std::vector<LocalServer> up(const UpOptions& opts) {
  auto dir = state_dir();
  auto binary = agentd::detail::ChildProcess::find_server_binary(opts.server_path);
  // Found before anything starts: a missing gateway leaves nothing behind.
  const std::string gateway_binary =
      opts.gateway_listen.empty() ? "" : find_gateway_binary(opts.gateway_path);
  std::vector<std::string> args{"--host", opts.host, "--port", "0"};
  for (const auto& p : opts.plugins) args.insert(args.end(), {"--plugin", p});
  for (const auto& d : opts.plugin_dirs) args.insert(args.end(), {"--plugin-dir", d});
  for (const auto& d : opts.agent_dirs) args.insert(args.end(), {"--agent-dir", d});
  if (!opts.model_config_path.empty())
    args.insert(args.end(), {"--model-config-path", opts.model_config_path});
  args.insert(args.end(), opts.extra_args.begin(), opts.extra_args.end());

  std::vector<Starting> starting;
  auto fail = [&](const std::string& why) {
    for (auto& s : starting)
      if (!s.process.reaped()) terminate_and_reap(s.process);
    throw LocalError(why);
  };
  // Starts binary with args, logging to NAME-PID.log in the state directory.
  auto start = [&](const LocalServer& what, const std::vector<std::string>& argv, const std::string& hint) {
    auto tmp_log = fmt::format("{}/{}-starting-{}-{}.log", dir, what.kind, ::getpid(), starting.size());
    Starting s;
    s.server = what;
    s.server.started_at = static_cast<std::int64_t>(std::time(nullptr));
    try {
      s.process = spawn_detached(what.binary, argv, tmp_log, hint);
    } catch (const LocalError& e) {
      fail(e.what());
    }
    s.server.pid = s.process.pid();
    s.server.log_path = fmt::format("{}/{}-{}.log", dir, what.kind, s.server.pid);
    std::error_code ec;
    fs::rename(tmp_log, s.server.log_path, ec);
    if (ec) s.server.log_path = tmp_log;
    starting.push_back(std::move(s));
  };
  // Waits until every process started has printed its ready line (or fails).
  auto deadline = Clock::now() + opts.timeout;
  auto wait_all = [&] {
    for (;;) {
      bool all_ready = true;
      for (auto& s : starting) {
        if (s.ready) continue;
        auto log = read_file(s.server.log_path);
        std::istringstream lines(log);
        std::string line;
        while (!s.ready && std::getline(lines, line)) {
          if (s.server.kind == LocalServer::kGateway) {
            s.ready = parse_gateway_ready_line(line, s.server);
          } else if (auto ready = agentd::net::parse_ready_line(line)) {
            s.server.port = ready->endpoint.port;
            s.server.server_id = ready->server_id;
            s.ready = true;
          }
        }
        if (s.ready) continue;
        if (auto status = s.process.try_wait()) {
          fail(fmt::format("{} {} before it was ready; the end of its log ({}):\n{}", s.server.kind,
                           describe_status(*status), s.server.log_path, tail_lines(log, 15)));
        }
        all_ready = false;
      }
      if (all_ready) return;
      if (Clock::now() >= deadline)
        fail(
            fmt::format("{} did not report ready within {} ms (raise --timeout; logs are "
                        "in {})",
                        starting.back().server.kind, opts.timeout.count(), dir));
      std::this_thread::sleep_for(kPollInterval);
    }
  };

  // Start them all, then wait for all: they start in parallel.
  LocalServer server;
  server.binary = binary;
  server.host = opts.host;
  for (int i = 0; i < opts.count; ++i) start(server, args, "pass --server-path or set $AGENTD_AS_SERVER");
  wait_all();
  if (!gateway_binary.empty()) {
    std::vector<LocalServer> servers;
    for (const auto& s : starting) servers.push_back(s.server);
    LocalServer gateway;
    gateway.kind = LocalServer::kGateway;
    gateway.binary = gateway_binary;
    gateway.host = opts.gateway_listen.substr(0, opts.gateway_listen.rfind(':'));
    start(gateway, gateway_args(opts, servers), "pass --gateway-path or set $AGENTD_GATEWAY");
    wait_all();
  }

  // They run on after this agentctl: from here on nothing waits for or kills them but `down`.
  std::vector<LocalServer> started;
  for (auto& s : starting) {
    s.process.release();
    started.push_back(s.server);
  }
  StateLock lock(dir);
  auto all = load_state(dir);
  all.insert(all.end(), started.begin(), started.end());
  save_state(dir, all);
  return started;
}

std::vector<LocalServer> recorded() {
  auto dir = state_dir();
  StateLock lock(dir);
  auto all = load_state(dir);
  for (auto& s : all) s.alive = is_alive(s);
  return all;
}

std::vector<LocalServer> down(std::chrono::milliseconds grace, bool remove_logs) {
  auto dir = state_dir();
  StateLock lock(dir);
  auto all = load_state(dir);
  std::vector<LocalServer> stopped;
  for (const auto& s : all) {
    if (is_alive(s)) {
      ::kill(s.pid, SIGTERM);
      stopped.push_back(s);
    }
  }
  auto deadline = Clock::now() + grace;
  auto any_alive = [&] {
    for (const auto& s : stopped)
      if (is_alive(s)) return true;
    return false;
  };
  while (any_alive() && Clock::now() < deadline) std::this_thread::sleep_for(kPollInterval);
  for (const auto& s : stopped)
    if (is_alive(s)) ::kill(s.pid, SIGKILL);
  auto kill_deadline = Clock::now() + std::chrono::seconds(5);
  while (any_alive() && Clock::now() < kill_deadline) std::this_thread::sleep_for(kPollInterval);
  for (const auto& s : all) {
    std::error_code ec;
    if (remove_logs && !s.log_path.empty()) fs::remove(s.log_path, ec);
  }
  save_state(dir, {});
  return stopped;
}

}  // namespace agentctl
