// What the workloads share: timing, progress lines, checks, running calls in windows, cleaning up
// after a workload, the targets of the rows, and the two measurements W11 repeats (W1's
// sequential replies, W2's burst).
#pragma once

#include "deployment.h"
#include "stats.h"

#include <agentd/client.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace agentd::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
inline double micros_since(Clock::time_point t0) { return seconds_since(t0) * 1e6; }

inline void progress(const std::string& what) { fmt::print(stderr, "agentd-bench: {}\n", what); }

inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Runs body(i) for i in [0, n) on `threads` threads; rethrows the first failure.
void parallel_for(std::size_t n, std::size_t threads, const std::function<void(std::size_t)>& body);

// Removes what a workload made: everything on our own children, only our agents elsewhere.
void cleanup(Deployment& dep, std::size_t server, const std::vector<AgentRef>& agents, std::size_t threads);

// Issues n calls in windows that fit the server's result pool (results read later must not be
// evicted first), reading each window's results before the next.
void run_windowed(std::size_t n, std::size_t window, const std::function<Placeholder(std::size_t)>& issue,
                  const std::function<void(const Msg&)>& check);

inline std::size_t pool_window(Deployment& dep, std::size_t server) {
  return std::max<std::size_t>(1, dep.max_pool_size(server) / 2);
}

inline Msg text_msg(std::size_t bytes) { return Msg("bench", std::string(bytes, 'x')); }

void require_class(Deployment& dep, std::size_t server, const std::string& cls);

// Adds to series the context switches process pid made per call while body made calls calls
// (context_switches(), proc_stats.h); nothing when pid is 0 (not counted) or its /proc cannot be
// read.
void add_switches(Series& series, std::int64_t pid, std::size_t calls, const std::function<void()>& body);

// Writes dir/models.yaml with the one model config the asynchronous model workloads use (W7,
// W13): "delayed", an openai_chat at url (the bench's --serve-model endpoint) allowing
// max_concurrency requests at once, no retries. Returns its path.
std::string write_delayed_model_config(const std::string& dir, const std::string& url,
                                       std::size_t max_concurrency);

// A fresh directory under the temporary directory for a child's --state-dir, removed with all
// it holds when destroyed. Declare it before the Client of the child that uses it, so that the
// child has exited (with its database closed) when the directory goes.
class TempStateDir {
 public:
  TempStateDir();
  ~TempStateDir();
  TempStateDir(const TempStateDir&) = delete;
  TempStateDir& operator=(const TempStateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline bool has_class(const ServerInfo& info, const std::string& cls) {
  return std::find(info.classes.begin(), info.classes.end(), cls) != info.classes.end();
}

inline double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

inline Target at_most_ratio(double b, std::string text) {
  return {Target::Kind::ratio_at_most, b, std::move(text)};
}
inline Target at_least_ratio(double b, std::string text) {
  return {Target::Kind::ratio_at_least, b, std::move(text)};
}
inline Target at_most(double b, std::string text) {
  return {Target::Kind::value_at_most, b, std::move(text)};
}
inline Target at_least(double b, std::string text) {
  return {Target::Kind::value_at_least, b, std::move(text)};
}

// Repeat r's two sides, the first one first on even repeats and the second first on odd ones, so
// that neither always runs on a machine the other warmed.
inline void alternating(int r, const std::function<void()>& first, const std::function<void()>& second) {
  if (r % 2 == 0) {
    first();
    second();
  } else {
    second();
    first();
  }
}

// One repeat's latency samples (us) as its p50 and p99 rows' figures: agentd's, and the
// baseline's when given.
inline void add_p50_p99(Row& p50, Row& p99, const std::vector<double>& agentd,
                        const std::vector<double>* baseline = nullptr) {
  p50.agentd.add(percentile(agentd, 50));
  p99.agentd.add(percentile(agentd, 99));
  if (baseline == nullptr) return;
  p50.baseline.add(percentile(*baseline, 50));
  p99.baseline.add(percentile(*baseline, 99));
}

// W1 (and W11): round trips of a.reply(msg).get() in microseconds, after 50 for warm-up; each
// answer checked.
std::vector<double> reply_latencies(AgentRef& a, const Msg& msg, std::size_t calls);

// W2's burst (and W11's): n replies spread over agents, issued in windows of `window`, all read;
// replies/s.
double reply_burst(std::vector<AgentRef>& agents, const Msg& msg, std::size_t n, std::size_t window);

}  // namespace agentd::bench
