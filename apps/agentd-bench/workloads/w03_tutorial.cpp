// W3: the tutorial scenario.
#include "workloads.h"

#include "workloads/common.h"

namespace agentd::bench {

void run_w3(const Config& cfg, Deployment& dep, Report& report) {
  for (std::size_t s = 0; s < dep.size(); ++s) require_class(dep, s, "WebAgent");
  Value args{{"sleep_ms", cfg.sleep_ms}};
  double sleep_s = cfg.sleep_ms / 1000.0;
  std::size_t n = cfg.web_agents;
  Row child_init{"W3", fmt::format("child-mode init, {} agents", n), "s"};
  Row indep_init{"W3", fmt::format("independent-mode init, {} agents", n), "s"};
  Row sequential{"W3", fmt::format("sequential, {} replies", n), "s"};
  Row distributed{"W3", fmt::format("distributed, {} replies", n), "s"};
  sequential.baseline_name = fmt::format("{} x sleep", n);
  distributed.baseline_name = "sleep";
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W3 repeat {}/{} (sleep {} ms)", r + 1, cfg.repeat, cfg.sleep_ms));
    {
      auto t0 = Clock::now();
      Client child = dep.spawn();
      std::vector<AgentRef> agents;
      for (std::size_t i = 0; i < n; ++i)
        agents.push_back(child.create_agent("WebAgent", fmt::format("W{}", i), args));
      child_init.agentd.add(seconds_since(t0));
    }
    // Independent mode: fresh connections to the running servers, agents spread over them.
    std::vector<Client> clients;
    std::vector<AgentRef> agents;
    auto t0 = Clock::now();
    for (std::size_t s = 0; s < dep.size(); ++s) {
      auto [host, port] = split_address(dep.client(s).address());
      clients.push_back(Client::connect(host, port, dep.client_options()));
    }
    for (std::size_t i = 0; i < n; ++i)
      agents.push_back(clients[i % clients.size()].create_agent("WebAgent", fmt::format("W{}", i), args));
    indep_init.agentd.add(seconds_since(t0));

    Msg page("user", Value{{"url", "page"}});
    t0 = Clock::now();
    for (auto& a : agents) a.reply(page).get();
    sequential.agentd.add(seconds_since(t0));
    sequential.baseline.add(n * sleep_s);

    t0 = Clock::now();
    std::vector<Placeholder> ps;
    for (auto& a : agents) ps.push_back(a.reply(page));
    for (auto& p : ps) expect(p.get().text().rfind("Answer from", 0) == 0, "W3: odd web answer");
    distributed.agentd.add(seconds_since(t0));
    distributed.baseline.add(sleep_s);
    for (std::size_t i = 0; i < agents.size(); ++i) clients[i % clients.size()].delete_agent(agents[i].id());
  }
  child_init.target = at_most(0.1, "< 0.1 s");
  child_init.note = "spawn an as_server child, wait for its ready line, connect, create the agents";
  distributed.target = at_most_ratio(1.01, "<= 1.01x");
  for (Row* row : {&child_init, &indep_init, &sequential, &distributed})
    report.rows.push_back(std::move(*row));
}

}  // namespace agentd::bench
