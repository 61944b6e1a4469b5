// W12: soak.
#include "workloads.h"

#include "workloads/common.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

namespace agentd::bench {

// --soak-calls replies over --soak-connections connections (each its own Client and thread, to
// agents of its own that keep no memory) to one fresh child with --state-dir, at most
// --soak-window in flight per connection; the server's RSS after the first 30% of the calls
// against the end (and its peak in between).
void run_w12(const Config& cfg, Deployment& dep, Report& report) {
  if (!dep.owned()) {
    report.skipped.push_back("W12: needs servers the bench starts (a fresh child with --state-dir)");
    return;
  }
  const std::size_t conns = std::max<std::size_t>(1, cfg.soak_connections);
  const std::size_t window = std::max<std::size_t>(1, cfg.soak_window);
  const std::size_t total = std::max<std::size_t>(conns, cfg.soak_calls);
  // Results stay readable until evicted by size: room for twice what may be in flight, so none
  // is evicted before its get().
  const std::size_t pool = std::max<std::size_t>(8192, 2 * conns * window);
  TempStateDir dir;  // outlives the child
  std::vector<std::string> args{"--max-pool-size", std::to_string(pool)};
  if (!cfg.soak_without_state) args.insert(args.end(), {"--state-dir", dir.path()});
  Client server = dep.spawn(args);
  const ServerInfo info0 = server.info();
  // FlakyAgent (examples/echo_agent) echoes without adding to memory or state, so what grows is
  // only what agentd itself keeps.
  const std::string cls = "FlakyAgent";
  expect(has_class(info0, cls), "W12: the child has no FlakyAgent class (echo_agent plugin)");
  expect(info0.state_dir.empty() == cfg.soak_without_state, "W12: the child did not take --state-dir");
  // Over loopback TCP (the child's advertised address), as independent clients would connect.
  auto [host, port] =
      split_address(info0.advertise_address.empty() ? server.address() : info0.advertise_address);
  progress(fmt::format(
      "W12 soak: {} connections to {}, {} agents each, {} calls, {} in flight "
      "per connection, --max-pool-size {}{}",
      conns, info0.advertise_address.empty() ? server.address() : info0.advertise_address, cfg.soak_agents,
      total, window, pool, cfg.soak_without_state ? ", WITHOUT --state-dir" : ", --state-dir"));
  std::vector<Client> clients;
  std::vector<std::vector<AgentRef>> agents;
  clients.reserve(conns);
  for (std::size_t i = 0; i < conns; ++i) {
    clients.push_back(Client::connect(host, port, dep.client_options()));
    agents.push_back(clients.back().create_agents(cls, std::max<std::size_t>(1, cfg.soak_agents)));
  }
  const Msg msg = text_msg(cfg.payload);
  std::atomic<std::size_t> done{0}, errors{0}, running{conns};
  std::mutex first_error_mu;
  std::string first_error;
  auto record_error = [&](const std::string& what) {
    ++errors;
    std::lock_guard lock(first_error_mu);
    if (first_error.empty()) first_error = what;
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < conns; ++t) {
    const std::size_t n = total / conns + (t < total % conns ? 1 : 0);
    threads.emplace_back([&, t, n]() {
      auto& mine = agents[t];
      std::vector<Placeholder> inflight;
      inflight.reserve(std::min(n, window));
      for (std::size_t start = 0; start < n; start += window) {
        inflight.clear();
        const std::size_t end = std::min(n, start + window);
        for (std::size_t i = start; i < end; ++i) {
          try {
            inflight.push_back(mine[i % mine.size()].reply(msg));
          } catch (const std::exception& e) {
            record_error(e.what());
            ++done;
          }
        }
        for (auto& p : inflight) {
          try {
            if (p.get().content != msg.content) record_error("a reply answered something else");
          } catch (const std::exception& e) {
            record_error(e.what());
          }
          ++done;
        }
      }
      --running;
    });
  }
  // This thread watches: RSS once 30% of the calls are done (warm-up: connections, agents, the
  // result pool filled, and with --state-dir the calls waiting for their commit at their steady
  // number; a 3,000,000-call soak shows RSS flat from about 300,000 calls on), the peak after it,
  // progress every 5 s.
  const std::size_t warm_calls = total * 3 / 10;
  std::optional<std::uint64_t> rss_warm;
  std::uint64_t rss_peak = 0;
  auto last_report = Clock::now();
  while (running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::size_t now_done = done.load();
    if (!rss_warm && now_done >= warm_calls) rss_warm = server.info().rss_bytes;
    if (rss_warm) rss_peak = std::max(rss_peak, server.info().rss_bytes);
    if (Clock::now() - last_report >= std::chrono::seconds(5)) {
      last_report = Clock::now();
      const ServerInfo i = server.info();
      progress(
          fmt::format("W12 soak: {}/{} calls, {:.0f} calls/s, {} errors, server RSS {:.1f} "
                      "MiB, state {:.1f} MiB",
                      now_done, total, now_done / seconds_since(t0), errors.load(), mib(i.rss_bytes),
                      mib(i.state_bytes)));
    }
  }
  for (auto& th : threads) th.join();
  const double secs = seconds_since(t0);
  const ServerInfo end = server.info();
  if (!rss_warm) rss_warm = end.rss_bytes;  // finished between two looks: no growth to see
  progress(fmt::format("W12 soak: {} calls in {:.1f} s, {} errors{}", total, secs, errors.load(),
                       first_error.empty() ? std::string() : " (first: " + first_error + ")"));

  Row calls{"W12", fmt::format("calls over {} connections", conns), "calls"};
  calls.agentd.add(static_cast<double>(total));
  calls.note = fmt::format(
      "replies to {} {}s per connection (no memory kept), at most {} in "
      "flight per connection, over loopback TCP; one run whatever --repeat{}",
      cfg.soak_agents, cls, window,
      cfg.soak_without_state ? "; WITHOUT --state-dir (--soak-without-state)" : "");
  Row errs{"W12", "errors", "calls"};
  errs.agentd.add(static_cast<double>(errors.load()));
  errs.target = at_most(0, "0");
  if (!first_error.empty()) errs.note = "first: " + first_error;
  Row rate{"W12", "throughput", "calls/s"};
  rate.agentd.add(total / secs);
  Row warm{"W12", "server RSS after 30% of the calls", "MiB"};
  warm.agentd.add(mib(*rss_warm));
  Row peak{"W12", "server RSS peak after warm-up", "MiB"};
  peak.agentd.add(mib(std::max(rss_peak, end.rss_bytes)));
  Row last{"W12", "server RSS at the end", "MiB"};
  last.agentd.add(mib(end.rss_bytes));
  Row growth{"W12", "server RSS growth after warm-up", "%"};
  growth.agentd.add((static_cast<double>(end.rss_bytes) - static_cast<double>(*rss_warm)) /
                    static_cast<double>(*rss_warm) * 100);
  growth.target = at_most(5, "< 5%");
  Row size{"W12", "state DB size at the end", "MiB"};
  size.agentd.add(mib(end.state_bytes));
  size.note = fmt::format("agentd.db + WAL + the 8 MiB commit log; results kept up to --max-pool-size {}{}",
                          pool, end.state_error.empty() ? "" : "; store failed: " + end.state_error);
  for (Row* row : {&calls, &errs, &rate, &warm, &peak, &last, &growth, &size})
    report.rows.push_back(std::move(*row));
}

}  // namespace agentd::bench
