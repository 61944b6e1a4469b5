// W4: creation and memory.
#include "workloads.h"

#include "workloads/common.h"

#include <optional>

namespace agentd::bench {

namespace {

// Synchronous create_agent calls (one round trip each) spread over several threads: what a
// program that does not use create_agents gets (W4's informative row).
std::vector<AgentRef> create_many(Client& c, const std::string& cls, const Value& args, std::size_t n,
                                  std::size_t threads) {
  std::vector<std::optional<AgentRef>> made(n);
  parallel_for(n, threads, [&](std::size_t i) { made[i] = c.create_agent(cls, {}, args); });
  std::vector<AgentRef> out;
  out.reserve(n);
  for (auto& m : made) out.push_back(std::move(*m));
  return out;
}

}  // namespace

void run_w4(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Row rate{"W4", fmt::format("create {} agents (create_agents)", cfg.create_n), "agents/s"};
  const std::size_t one_by_one_n = std::min<std::size_t>(cfg.create_n, 10000);
  Row one_by_one{"W4", fmt::format("create {} agents (create_agent, {} threads)", one_by_one_n, cfg.threads),
                 "agents/s"};
  Row rss{"W4", "server RSS per idle agent", "B"};
  Row calls{"W4", "then one reply to each", "calls/s"};
  Msg msg = text_msg(cfg.payload);
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W4 repeat {}/{} ({} agents)", r + 1, cfg.repeat, cfg.create_n));
    // On our own deployment every repeat gets a fresh server, so RSS is not masked by reuse.
    std::optional<Client> fresh;
    if (dep.owned()) fresh.emplace(dep.spawn());
    Client& c = fresh ? *fresh : dep.client(0);
    ServerInfo before = c.info();
    auto t0 = Clock::now();
    auto agents = c.create_agents("EchoAgent", cfg.create_n);
    rate.agentd.add(cfg.create_n / seconds_since(t0));
    ServerInfo after = c.info();
    rss.agentd.add((static_cast<double>(after.rss_bytes) - static_cast<double>(before.rss_bytes)) /
                   cfg.create_n);
    t0 = Clock::now();
    run_windowed(
        agents.size(), std::max<std::size_t>(1, before.max_pool_size / 2),
        [&](std::size_t i) { return agents[i].reply(msg); },
        [&](const Msg& m) { expect(m.content == msg.content, "W4: wrong echo"); });
    calls.agentd.add(agents.size() / seconds_since(t0));
    if (fresh)
      fresh->delete_all_agents();
    else
      cleanup(dep, 0, agents, cfg.threads);
    // One synchronous create_agent at a time per thread: what a program that does not batch
    // gets (each waits for its constructor and a round trip).
    t0 = Clock::now();
    auto singles = create_many(c, "EchoAgent", Value::object(), one_by_one_n, cfg.threads);
    one_by_one.agentd.add(one_by_one_n / seconds_since(t0));
    if (fresh)
      fresh->delete_all_agents();
    else
      cleanup(dep, 0, singles, cfg.threads);
  }
  rate.target = at_least(50000, ">= 50000/s");
  rss.target = at_most(2048, "< 2048 B");
  rss.note = "(rss after - rss before) / N, from Client::info().rss_bytes";
  one_by_one.note = "informative: synchronous create_agent calls from several threads";
  for (Row* row : {&rate, &rss, &calls, &one_by_one}) report.rows.push_back(std::move(*row));
}

}  // namespace agentd::bench
