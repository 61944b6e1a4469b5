#include "gateway_process.h"

#include "workloads/common.h"

#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>

#include <fmt/format.h>

namespace agentd::bench {

std::string find_gateway(const Config& cfg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto runnable = [&](const fs::path& p) {
    return ::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p, ec);
  };
  if (!cfg.gateway.empty()) {
    if (!runnable(cfg.gateway))
      throw std::runtime_error(fmt::format("--gateway {}: not an executable file", cfg.gateway));
    return cfg.gateway;
  }
  if (const char* env = std::getenv("AGENTD_GATEWAY"); env && *env) {
    if (!runnable(env))
      throw std::runtime_error(fmt::format("$AGENTD_GATEWAY {}: not an executable file", env));
    return env;
  }
  std::vector<std::string> looked;
  if (auto self = fs::read_symlink("/proc/self/exe", ec); !ec) {
    const fs::path beside = self.parent_path() / "agentd-gateway";
    if (runnable(beside)) return beside.string();
    looked.push_back(beside.string());
  }
  std::string_view dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (!dir.empty() && runnable(fs::path(dir) / "agentd-gateway"))
      return (fs::path(dir) / "agentd-gateway").string();
  }
  looked.push_back("$PATH");
  std::string places;
  for (const auto& l : looked) places += (places.empty() ? "" : ", ") + l;
  throw NoGateway(fmt::format(
      "no agentd-gateway at {} (build it, or name it with --gateway PATH or $AGENTD_GATEWAY)", places));
}

GatewayProcess::GatewayProcess(const std::string& binary, const std::string& server, const std::string& token,
                               const Config& cfg, bool owned, const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {binary,
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--server",
                                   server,
                                   "--threads",
                                   std::to_string(cfg.gateway_threads)};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  if (!token.empty()) {
    argv.push_back("--upstream-token-file");
    argv.push_back(dir_.write_private("upstream-token", token));
  }
  if (!owned && !cfg.tls_ca.empty() && cfg.tls_server.empty()) {
    argv.insert(argv.end(), {"--upstream-tls-ca", cfg.tls_ca});
    if (!cfg.tls_cert.empty())
      argv.insert(argv.end(), {"--upstream-tls-cert", cfg.tls_cert, "--upstream-tls-key", cfg.tls_key});
  }
  log_ = dir_.add_file("gateway.log");
  detail::SpawnOptions spawn;
  spawn.argv = argv;
  spawn.in = detail::Redirect::null();
  spawn.out = detail::Redirect::pipe();
  spawn.err = detail::Redirect::append_to(log_);
  process_ = detail::Subprocess::spawn(spawn);
  // "agentd-gateway ready: listening on 127.0.0.1:PORT server=... pid=N"
  const std::string line = ready_line(std::chrono::seconds(20));
  const std::string marker = "listening on ";
  const auto at = line.find(marker);
  const auto end = at == std::string::npos ? at : line.find(' ', at + marker.size());
  const std::string listen =
      at == std::string::npos ? std::string() : line.substr(at + marker.size(), end - at - marker.size());
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos)
    throw std::runtime_error(
        fmt::format("agentd-gateway did not start: it said \"{}\"; its log ends:\n{}", line, log_tail()));
  port_ = static_cast<std::uint16_t>(std::stoul(listen.substr(colon + 1)));
}

GatewayProcess::~GatewayProcess() {
  if (process_.pid() > 0) process_.terminate(std::chrono::seconds(5));
}

std::string GatewayProcess::ready_line(std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string line;
  const int fd = process_.stdout_pipe().get();
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char c;
    const auto n = ::read(fd, &c, 1);
    if (n <= 0) break;  // it exited
    if (c == '\n') return line;
    line += c;
  }
  throw std::runtime_error(fmt::format("agentd-gateway did not say it was ready ({}); its log ends:\n{}",
                                       line.empty() ? "no output" : "it said \"" + line + "\"", log_tail()));
}

std::string GatewayProcess::log_tail() const {
  std::ifstream in(log_);
  std::vector<std::string> lines;
  std::string l;
  while (std::getline(in, l)) lines.push_back(l);
  std::string out;
  for (std::size_t i = lines.size() > 20 ? lines.size() - 20 : 0; i < lines.size(); ++i)
    out += lines[i] + "\n";
  return out;
}

}  // namespace agentd::bench
