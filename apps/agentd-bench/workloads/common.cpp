#include "workloads/common.h"

#include "proc_stats.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <system_error>
#include <thread>

namespace agentd::bench {

void add_switches(Series& series, std::int64_t pid, std::size_t calls, const std::function<void()>& body) {
  const auto before = pid != 0 ? context_switches(static_cast<pid_t>(pid)) : std::nullopt;
  body();
  if (!before) return;
  if (const auto after = context_switches(static_cast<pid_t>(pid)))
    series.add(static_cast<double>(*after - *before) / static_cast<double>(calls));
}

void parallel_for(std::size_t n, std::size_t threads, const std::function<void(std::size_t)>& body) {
  threads = std::max<std::size_t>(1, std::min(threads, n));
  std::exception_ptr failure;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t]() {
      try {
        for (std::size_t i = t; i < n; i += threads) {
          {
            std::lock_guard lock(mu);
            if (failure) return;
          }
          body(i);
        }
      } catch (...) {
        std::lock_guard lock(mu);
        if (!failure) failure = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
}

void cleanup(Deployment& dep, std::size_t server, const std::vector<AgentRef>& agents, std::size_t threads) {
  Client& c = dep.client(server);
  if (dep.owned()) {
    c.delete_all_agents();
    return;
  }
  parallel_for(agents.size(), threads, [&](std::size_t i) { c.delete_agent(agents[i].id()); });
}

void run_windowed(std::size_t n, std::size_t window, const std::function<Placeholder(std::size_t)>& issue,
                  const std::function<void(const Msg&)>& check) {
  window = std::max<std::size_t>(1, window);
  std::vector<Placeholder> inflight;
  inflight.reserve(std::min(n, window));
  for (std::size_t start = 0; start < n; start += window) {
    inflight.clear();
    for (std::size_t i = start; i < std::min(n, start + window); ++i) inflight.push_back(issue(i));
    for (auto& p : inflight) check(p.get());
  }
}

void require_class(Deployment& dep, std::size_t server, const std::string& cls) {
  if (!dep.has_class(server, cls))
    throw std::runtime_error(fmt::format(
        "server {} has no agent class {} (start it with the echo_agent and web_agent plugins)", server, cls));
}

TempStateDir::TempStateDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "agentd-bench-state-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error(
        fmt::format("cannot make a state dir from {}: {}", pattern, std::strerror(errno)));
  path_ = pattern;
}

TempStateDir::~TempStateDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<double> reply_latencies(AgentRef& a, const Msg& msg, std::size_t calls) {
  for (int i = 0; i < 50; ++i) a.reply(msg).get();
  std::vector<double> out;
  out.reserve(calls);
  for (std::size_t i = 0; i < calls; ++i) {
    auto t0 = Clock::now();
    Msg m = a.reply(msg).get();
    out.push_back(micros_since(t0));
    expect(m.content == msg.content, "W1: the echo agent answered something else");
  }
  return out;
}

double reply_burst(std::vector<AgentRef>& agents, const Msg& msg, std::size_t n, std::size_t window) {
  auto t0 = Clock::now();
  run_windowed(
      n, window, [&](std::size_t i) { return agents[i % agents.size()].reply(msg); },
      [&](const Msg& m) { expect(m.content == msg.content, "W2: wrong echo"); });
  return n / seconds_since(t0);
}

std::string write_delayed_model_config(const std::string& dir, const std::string& url,
                                       std::size_t max_concurrency) {
  const std::string path = dir + "/models.yaml";
  std::ofstream out(path);
  out << "- config_name: delayed\n"
      << "  model_type: openai_chat\n"
      << "  model_name: bench\n"
      << "  api_key: none\n"
      << "  max_concurrency: " << max_concurrency << "\n"
      << "  client_args: {base_url: \"" << url << "\", timeout: 120, max_retries: 0}\n";
  return path;
}

}  // namespace agentd::bench
