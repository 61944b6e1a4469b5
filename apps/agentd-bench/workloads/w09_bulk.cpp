// W9: bulk replies.
#include "workloads.h"

#include "workloads/common.h"

#include <optional>

namespace agentd::bench {

// The bulk-load scenario: one reply to each of --bulk-n agents, every placeholder kept and all
// calls in flight before the first get(), then all read in order. Nothing windows the calls, so
// the server gathers completions by the hundred thousand per loop turn.
void run_w9(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Row create{"W9", fmt::format("create {} agents (create_agents)", cfg.bulk_n), "s"};
  Row replies{"W9", fmt::format("{} replies in flight at once, then read in order", cfg.bulk_n), "replies/s"};
  Row total{"W9", "reply issue + read time", "s"};
  Row rss{"W9", "server RSS after the replies", "MiB"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W9 repeat {}/{} ({} agents)", r + 1, cfg.repeat, cfg.bulk_n));
    std::optional<Client> fresh;
    if (dep.owned()) fresh.emplace(dep.spawn());
    Client& c = fresh ? *fresh : dep.client(0);
    auto t0 = Clock::now();
    auto agents = c.create_agents("EchoAgent", cfg.bulk_n);
    create.agentd.add(seconds_since(t0));
    t0 = Clock::now();
    std::vector<Placeholder> ps;
    ps.reserve(agents.size());
    for (std::size_t i = 0; i < agents.size(); ++i)
      ps.push_back(agents[i].reply(Msg("bench", Value(static_cast<std::int64_t>(i)))));
    for (std::size_t i = 0; i < ps.size(); ++i)
      expect(ps[i].get().content == Value(static_cast<std::int64_t>(i)), "W9: wrong echo");
    const double s = seconds_since(t0);
    replies.agentd.add(agents.size() / s);
    total.agentd.add(s);
    rss.agentd.add(c.info().rss_bytes / 1048576.0);
    ps.clear();
    if (fresh)
      fresh->delete_all_agents();
    else
      cleanup(dep, 0, agents, cfg.threads);
  }
  replies.note = "every reply must arrive (a lost completion fails the workload)";
  rss.note = "informative: agents, their memories and the finished results";
  for (Row* row : {&create, &replies, &total, &rss}) report.rows.push_back(std::move(*row));
}

}  // namespace agentd::bench
