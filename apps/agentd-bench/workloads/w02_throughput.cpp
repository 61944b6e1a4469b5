// W2: throughput.
#include "workloads.h"

#include "workloads/common.h"

#include "baselines.h"

#include <algorithm>

namespace agentd::bench {

void run_w2(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Client& c = dep.client(0);
  auto agents = c.create_agents("EchoAgent", cfg.echo_agents);
  Msg msg = text_msg(cfg.payload);
  EchoServers echo;
  Row row{"W2", fmt::format("{} replies in flight, {} agents", cfg.replies, cfg.echo_agents), "replies/s"};
  row.baseline_name = "capnp echo";
  std::size_t window = pool_window(dep, 0);
  if (window < cfg.replies)
    row.note = fmt::format("issued in windows of {} (half the server's --max-pool-size)", window);
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W2 repeat {}/{}", r + 1, cfg.repeat));
    row.agentd.add(reply_burst(agents, msg, cfg.replies, window));
    row.baseline.add(capnp_echo_throughput(echo.capnp_port(), cfg.replies, cfg.payload));
  }
  row.target = at_least_ratio(0.7, ">= 0.7x");
  if (!cfg.tls_server.empty()) {
    // The same burst on the --tls-server, against this run's plaintext bursts.
    Client tc = dep.connect_tls_server();
    auto tls_agents = tc.create_agents("EchoAgent", cfg.echo_agents);
    std::size_t tls_window = std::min(window, std::max<std::size_t>(1, tc.info().max_pool_size / 2));
    Row tls{"W2", fmt::format("{} replies in flight over TLS", cfg.replies), "replies/s"};
    tls.baseline_name = "plaintext";
    tls.note = "informative: TLS server " + cfg.tls_server;
    auto burst = [&](std::vector<AgentRef>& on, std::size_t w) {
      return reply_burst(on, msg, cfg.replies, w);
    };
    for (int r = 0; r < cfg.repeat; ++r) {
      progress(fmt::format("W2 over TLS repeat {}/{}", r + 1, cfg.repeat));
      tls.baseline.add(burst(agents, tls_window));
      tls.agentd.add(burst(tls_agents, tls_window));
    }
    report.rows.push_back(std::move(row));
    report.rows.push_back(std::move(tls));
    tc.delete_all_agents();
  } else {
    report.rows.push_back(std::move(row));
  }
  cleanup(dep, 0, agents, cfg.threads);
}

}  // namespace agentd::bench
