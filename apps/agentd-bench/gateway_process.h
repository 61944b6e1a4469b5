// An agentd-gateway child for the workloads that measure it (W14, W15): found like as_server
// (--gateway, $AGENTD_GATEWAY, beside agentd-bench, $PATH), started in front of one server, its
// port read from its ready line, stopped when destroyed (what /proc says of it: proc_stats.h).
#pragma once

#include "config.h"
#include "private_dir.h"
#include "proc_stats.h"
#include "subprocess.h"

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace agentd::bench {

// No agentd-gateway to run: the workload is skipped, not failed.
struct NoGateway : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The agentd-gateway binary to run. Throws NoGateway when there is none, std::runtime_error
// when the one named (--gateway, $AGENTD_GATEWAY) is not an executable file.
std::string find_gateway(const Config& cfg);

// A running agentd-gateway in front of server (host:port), stopped (SIGTERM) when destroyed,
// with --threads cfg.gateway_threads and extra_args. Its request log (one JSON line per request,
// on stderr) goes to a file in a private directory, quoted when it fails to start.
class GatewayProcess {
 public:
  GatewayProcess(const std::string& binary, const std::string& server, const std::string& token,
                 const Config& cfg, bool owned, const std::vector<std::string>& extra_args = {});
  ~GatewayProcess();
  GatewayProcess(const GatewayProcess&) = delete;
  GatewayProcess& operator=(const GatewayProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return process_.pid(); }
  std::uint64_t rss() const { return status_kb(pid(), "VmRSS"); }
  std::uint64_t peak_rss() const { return status_kb(pid(), "VmHWM"); }
  std::size_t threads() const { return detail::thread_count(pid()); }
  double cpu() const { return cpu_seconds(pid()); }

 private:
  std::string ready_line(std::chrono::seconds timeout);
  std::string log_tail() const;

  detail::PrivateDir dir_;
  std::string log_;
  detail::Subprocess process_;
  std::uint16_t port_ = 0;
};

}  // namespace agentd::bench
