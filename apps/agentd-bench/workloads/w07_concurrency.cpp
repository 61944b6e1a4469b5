// W7: blocking concurrency, then asynchronous agents waiting on a timer and on a model.
#include "workloads.h"

#include "workloads/common.h"

#include "model_endpoint.h"
#include "subprocess.h"  // thread_count

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

namespace agentd::bench {

namespace {
void run_w7_async(const Config& cfg, Deployment& dep, Report& report);
void run_w7_model(const Config& cfg, Deployment& dep, Report& report);
}  // namespace

void run_w7(const Config& cfg, Deployment& dep, Report& report) {
  require_class(dep, 0, "EchoAgent");
  Client& c = dep.client(0);
  progress(fmt::format("W7 creating {} agents", cfg.agents));
  auto agents = c.create_agents("EchoAgent", cfg.agents, Value{{"sleep_ms", cfg.block_ms}});
  Msg msg = text_msg(cfg.payload);
  double block_s = cfg.block_ms / 1000.0;
  Row row{"W7", fmt::format("{} agents blocking {} ms, called at once", cfg.agents, cfg.block_ms), "s"};
  row.baseline_name = "one block";
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W7 repeat {}/{}", r + 1, cfg.repeat));
    auto t0 = Clock::now();
    run_windowed(
        agents.size(), std::max(agents.size(), pool_window(dep, 0)),
        [&](std::size_t i) { return agents[i].reply(msg); },
        [&](const Msg& m) { expect(m.content == msg.content, "W7: wrong echo"); });
    row.agentd.add(seconds_since(t0));
    row.baseline.add(block_s);
  }
  row.target = at_most(1.5 * block_s, fmt::format("< {:.3g} s", 1.5 * block_s));
  report.rows.push_back(std::move(row));
  cleanup(dep, 0, agents, cfg.threads);
  if (dep.has_class(0, "WaitAgent")) run_w7_async(cfg, dep, report);
}

namespace {

// Calls every agent at once, then reads and checks every answer; returns the seconds it took.
// While the calls still wait (before wait_s has passed), samples server pid's thread count into
// threads (pid 0: not on this machine, no sample).
double all_at_once(std::vector<AgentRef>& agents, const Msg& msg, std::int64_t pid, double wait_s,
                   Series& threads, const std::function<void(const Msg&)>& check) {
  auto t0 = Clock::now();
  std::vector<Placeholder> ps;
  ps.reserve(agents.size());
  for (auto& a : agents) ps.push_back(a.reply(msg));
  if (pid != 0 && seconds_since(t0) < wait_s)
    threads.add(static_cast<double>(detail::thread_count(static_cast<pid_t>(pid))));
  for (auto& p : ps) check(p.get());
  return seconds_since(t0);
}

// Adds the rows of an all-at-once run: its time, which must stay within `limit` seconds, and the
// server's threads while the calls waited (< 64), when they were sampled.
void add_all_at_once_rows(Report& report, Row row, Row threads, double limit) {
  row.target = at_most(limit, fmt::format("<= {:.3g} s", limit));
  report.rows.push_back(std::move(row));
  if (!threads.agentd.empty()) {
    threads.target = at_most(63, "< 64");
    report.rows.push_back(std::move(threads));
  }
}

// Asynchronous agents waiting on a timer (sleep_for): every call in flight at once, none holding
// a thread. The server's threads are counted while all of them wait.
void run_w7_async(const Config& cfg, Deployment& dep, Report& report) {
  // A fresh child when the bench owns its servers: the blocking row grew the shared server's
  // worker pool, which would count here.
  std::optional<Client> fresh;
  if (dep.owned()) fresh.emplace(dep.spawn());
  Client& c = fresh ? *fresh : dep.client(0);
  progress(fmt::format("W7 creating {} asynchronous agents", cfg.async_agents));
  auto agents = c.create_agents("WaitAgent", cfg.async_agents, Value{{"sleep_ms", cfg.wait_ms}});
  Msg msg = text_msg(cfg.payload);
  const double wait_s = cfg.wait_ms / 1000.0;
  const bool same_machine = dep.owned();
  const std::int64_t pid = c.info().pid;
  Row row{"W7", fmt::format("{} async agents waiting {} ms, called at once", cfg.async_agents, cfg.wait_ms),
          "s"};
  row.baseline_name = "one wait";
  Row threads{"W7", "server threads while they all wait", "threads"};
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W7 async repeat {}/{}", r + 1, cfg.repeat));
    row.agentd.add(
        all_at_once(agents, msg, same_machine ? pid : 0, wait_s, threads.agentd,
                    [&](const Msg& m) { expect(m.content == msg.content, "W7: wrong async echo"); }));
    row.baseline.add(wait_s);
  }
  add_all_at_once_rows(report, std::move(row), std::move(threads), 2.5 * wait_s);
  if (!fresh) cleanup(dep, 0, agents, cfg.threads);
  if (cfg.model_agents > 0 && dep.owned()) run_w7_model(cfg, dep, report);
}

// Asynchronous agents waiting on real HTTP model calls: a local OpenAI-compatible endpoint
// (--serve-model, a child of the bench) answers each request after --wait-ms; a fresh child
// server has it as model config "delayed", with max_concurrency high enough for every call.
void run_w7_model(const Config& cfg, Deployment& dep, Report& report) {
  const double wait_s = cfg.wait_ms / 1000.0;
  EndpointProcess endpoint(std::chrono::milliseconds(cfg.wait_ms));
  const std::string dir = fmt::format("/tmp/agentd-bench-w7-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string config_path = write_delayed_model_config(dir, endpoint.url(), cfg.model_agents);
  ChildOptions o = dep.child_options();
  o.model_config_path = config_path;
  Client c = Client::spawn_child(o);
  std::filesystem::remove_all(dir);
  const std::int64_t pid = c.info().pid;
  progress(fmt::format("W7 creating {} asynchronous agents asking a model", cfg.model_agents));
  auto agents = c.create_agents("AskAgent", cfg.model_agents, Value{{"model", "delayed"}});
  Row row{"W7",
          fmt::format("{} async agents each asking a model that takes {} ms (HTTP), at once",
                      cfg.model_agents, cfg.wait_ms),
          "s"};
  row.baseline_name = "one wait";
  Row threads{"W7", "server threads while the model calls wait", "threads"};
  Msg msg("bench", "hello");
  for (int r = 0; r < cfg.repeat; ++r) {
    progress(fmt::format("W7 model repeat {}/{}", r + 1, cfg.repeat));
    row.agentd.add(all_at_once(agents, msg, pid, wait_s, threads.agentd, [](const Msg& m) {
      expect(m.text() == "echo: hello", "W7: wrong model answer");
    }));
    row.baseline.add(wait_s);
  }
  add_all_at_once_rows(report, std::move(row), std::move(threads), 3 * wait_s);
}

}  // namespace
}  // namespace agentd::bench
