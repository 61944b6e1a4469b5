// W5: pipelined chain.
#include "workloads.h"

#include "workloads/common.h"

namespace agentd::bench {

void run_w5(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Client& c = dep.client(0);
  auto agents = c.create_agents("EchoAgent", cfg.chain);
  Msg msg = text_msg(cfg.payload);
  Row row{"W5", fmt::format("{}-agent pipelined chain", cfg.chain), "ms"};
  row.baseline_name = "awaited calls";
  row.ratio_inverted = true;
  // Each repeat runs the chain and the awaited calls five times each, alternating, and keeps the
  // median of each: one chain takes a millisecond or two, where a scheduling hiccup weighs a lot.
  constexpr int kInner = 5;
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W5 repeat {}/{}", r + 1, cfg.repeat));
    std::vector<double> piped_ms, awaited_ms;
    for (int k = 0; k < kInner; ++k) {
      auto t0 = Clock::now();
      Placeholder x = agents[0].reply(msg);
      for (std::size_t i = 1; i < agents.size(); ++i) x = agents[i].reply(x);
      Msg piped = x.get();
      piped_ms.push_back(seconds_since(t0) * 1e3);
      expect(piped.content == msg.content, "W5: the chain changed the message");

      t0 = Clock::now();
      Msg m = msg;
      for (auto& a : agents) m = a.reply(m).get();
      awaited_ms.push_back(seconds_since(t0) * 1e3);
      expect(m.content == msg.content, "W5: the awaited calls changed the message");
    }
    row.agentd.add(percentile(piped_ms, 50));
    row.baseline.add(percentile(awaited_ms, 50));
  }
  row.target = at_least_ratio(10, "speed-up >= 10x");
  row.note = "ratio = awaited / pipelined (aim: 20x)";
  report.rows.push_back(std::move(row));
  cleanup(dep, 0, agents, cfg.threads);
}

}  // namespace agentd::bench
