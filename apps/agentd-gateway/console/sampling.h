// The console's numbers over time: a sample is what changed between two readings of every
// server's ServerInfo, as rates per second and latency quantiles of the calls that finished in
// between. Pure functions (no I/O, no clock), so the arithmetic is tested alone
// (tests/gateway/console_sampling_test.cpp).
#pragma once

#include <agentd/client.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gateway::console {

// One server as read at one moment: its info, or why it could not be read.
struct ServerSnapshot {
  std::string address;
  std::optional<agentd::ServerInfo> info;  // nullopt: down
  std::string down_reason;
};

// What one model config did in an interval, summed over the servers.
struct ModelRates {
  double calls_per_s = 0;
  double errors_per_s = 0;
  std::optional<double> latency_p50, latency_p95;  // seconds; nullopt: no call finished
  double prompt_tokens_per_s = 0;
  double completion_tokens_per_s = 0;
};

// What the servers did between two readings, summed over the servers.
struct Sample {
  std::int64_t t_unix_ms = 0;  // when the later reading was taken
  double calls_per_s = 0;      // calls finished (completed or failed)
  double failed_per_s = 0;
  std::optional<double> latency_p50, latency_p95;  // of the calls finished in the interval
  double prompt_tokens_per_s = 0;
  double completion_tokens_per_s = 0;
  // Gauges of the later reading.
  std::uint64_t agents = 0;
  std::uint64_t calls_running = 0;
  std::uint64_t calls_queued = 0;
  std::map<std::string, ModelRates> models;  // by config name
};

// now - before, bucket by bucket: the observations made between two readings of one histogram.
// nullopt when the two cannot be compared (other bounds, or a count went down: the server
// restarted in between).
std::optional<agentd::Histogram> histogram_delta(const agentd::Histogram& now,
                                                 const agentd::Histogram& before);
// Adds h into sum (sum empty: becomes h). False (sum unchanged) when their bounds differ.
bool histogram_add(agentd::Histogram& sum, const agentd::Histogram& h);

// The sample of the interval between two readings `seconds` apart (> 0). Servers are matched by
// address; a server down in either reading, or whose server id changed (it restarted), adds no
// rates but its gauges when up now.
Sample make_sample(const std::vector<ServerSnapshot>& before, const std::vector<ServerSnapshot>& now,
                   double seconds, std::int64_t t_unix_ms);

// The sample as the console API's JSON (CONTRACT.md: sample).
nlohmann::json sample_json(const Sample& s);

}  // namespace gateway::console
