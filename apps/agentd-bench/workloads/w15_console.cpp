// W15: what the console (agentd-gateway /console) costs a server. Two parts:
//   pages     --console-agents EchoAgents on server 1 (a fresh child per repeat on the bench's
//             own deployment), 1,000 of them called once; then pages of 100 through
//             Client::query_agents, each the p50 round trip of 20 (an upper bound of the
//             server's time): sorted by id, by id at the middle (a deep page), busiest first, a
//             search; and the same page through the gateway's /console/api/agents;
//   updates   the server's CPU (its own cpu_seconds) over --console-seconds with an
//             agentd-gateway in front of it, whose console samples every server once a second,
//             beside the same time without it.
#include "workloads.h"

#include "workloads/common.h"

#include "gateway_process.h"
#include "http_load.h"

#include <optional>
#include <thread>

namespace agentd::bench {

namespace {

constexpr int kPageSamples = 20;

double p50_ms(const std::function<void()>& op) {
  std::vector<double> ms;
  for (int i = 0; i < kPageSamples; ++i) {
    const auto t0 = Clock::now();
    op();
    ms.push_back(seconds_since(t0) * 1000);
  }
  return percentile(ms, 50);
}

// The server's CPU over `seconds`, in percent of one core (its own cpu_seconds, so the info()
// calls reading it count too: two per window).
double server_cpu_percent(Client& c, int seconds) {
  const ServerInfo before = c.info();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const ServerInfo after = c.info();
  return (after.cpu_seconds - before.cpu_seconds) / seconds_since(t0) * 100;
}

}  // namespace

void run_w15(const Config& cfg, Deployment& dep, Report& report) {
  std::optional<std::string> gateway;
  try {
    gateway = find_gateway(cfg);
  } catch (const NoGateway& e) {
    report.skipped.push_back(fmt::format("W15 through the gateway: {}", e.what()));
  }
  require_class(dep, 0, "EchoAgent");
  const std::size_t n = cfg.console_agents;
  Row by_id{"W15", fmt::format("page of 100 of {} agents, by id", n), "ms"};
  Row deep{"W15", fmt::format("page of 100 of {} agents, by id at offset {}", n, n / 2), "ms"};
  Row busiest{"W15", fmt::format("page of 100 of {} agents, busiest first", n), "ms"};
  Row search{"W15", fmt::format("page of 100 of {} agents, search", n), "ms"};
  Row http{"W15", "the same first page through GET /console/api/agents", "ms"};
  Row cpu{"W15", "server CPU with the console's live updates (1/s)", "%"};
  cpu.baseline_name = "idle, no gateway";
  Msg msg = text_msg(16);
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W15 repeat {}/{} ({} agents)", r + 1, cfg.repeat, n));
    std::optional<Client> fresh;
    if (dep.owned()) fresh.emplace(dep.spawn());
    Client& c = fresh ? *fresh : dep.client(0);
    auto agents = c.create_agents("EchoAgent", n, Value::object(), "console-");
    const std::size_t called = std::min<std::size_t>(1000, agents.size());
    run_windowed(
        called, 500, [&](std::size_t i) { return agents[i * (agents.size() / called)].reply(msg); },
        [&](const Msg&) {});

    const auto page = [&](AgentQuery q) {
      q.limit = 100;
      AgentPage p = c.query_agents(q);
      expect(p.total >= n, "W15: the page does not count every agent");
      return p;
    };
    by_id.agentd.add(p50_ms([&] { expect(page({}).agents.size() == 100, "W15: a short page"); }));
    AgentQuery middle;
    middle.offset = n / 2;
    AgentQuery busiest_first;
    busiest_first.sort = AgentQuery::Sort::calls;
    busiest_first.descending = true;
    AgentQuery searched;
    searched.search = "console-12";
    deep.agentd.add(p50_ms([&] { page(middle); }));
    busiest.agentd.add(p50_ms([&] {
      AgentPage p = page(busiest_first);
      expect(p.agents.front().completed_calls >= 1, "W15: busiest first is not busy");
    }));
    search.agentd.add(p50_ms([&] { page(searched); }));

    if (gateway) {
      const ServerInfo info = c.info();
      const std::string server = info.advertise_address.empty() ? c.address() : info.advertise_address;
      cpu.baseline.add(server_cpu_percent(c, cfg.console_seconds));
      GatewayProcess gp(*gateway, server, dep.client_options().token, cfg, dep.owned());
      HttpConnection conn("127.0.0.1", gp.port());
      http.agentd.add(p50_ms([&] {
        HttpAnswer a = conn.get("/console/api/agents?limit=100");
        expect(a.status == 200,
               fmt::format("W15: /console/api/agents answered {}: {}", a.status, a.body.substr(0, 200)));
      }));
      cpu.agentd.add(server_cpu_percent(c, cfg.console_seconds));
    }
    if (fresh)
      fresh->delete_all_agents();
    else
      cleanup(dep, 0, agents, cfg.threads);
  }
  for (Row* row : {&by_id, &deep, &busiest, &search}) {
    row->target = at_most(100, "<= 100 ms");
    row->note = "p50 of 20 query_agents round trips (server time and one round trip)";
  }
  http.note = "informative: p50 of 20, gateway + server";
  cpu.target = at_most(1, "<= 1%");
  cpu.note = fmt::format("cpu_seconds of the server over {} s, in % of one core", cfg.console_seconds);
  for (Row* row : {&by_id, &deep, &busiest, &search}) report.rows.push_back(std::move(*row));
  if (gateway) {
    report.rows.push_back(std::move(http));
    report.rows.push_back(std::move(cpu));
  }
}

}  // namespace agentd::bench
