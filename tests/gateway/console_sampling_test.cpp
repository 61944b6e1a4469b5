// The console's sampler arithmetic (apps/agentd-gateway/console/sampling): rates from two
// readings, histogram deltas and their quantiles, restarts and servers down.
#include "console/sampling.h"

#include <catch2/catch.hpp>

using gateway::console::histogram_add;
using gateway::console::histogram_delta;
using gateway::console::make_sample;
using gateway::console::ServerSnapshot;

namespace {

agentd::Histogram hist(std::vector<std::uint64_t> counts, double sum) {
  agentd::Histogram h;
  h.bounds = {0.1, 1.0, 10.0};
  h.counts = std::move(counts);
  for (auto c : h.counts) h.count += c;
  h.sum = sum;
  return h;
}

ServerSnapshot server(const std::string& address, const std::string& id, std::uint64_t completed,
                      std::uint64_t failed, agentd::Histogram latency) {
  agentd::ServerInfo i;
  i.server_id = id;
  i.calls_completed = completed;
  i.calls_failed = failed;
  i.call_latency = std::move(latency);
  i.agent_count = 7;
  i.calls_queued = 2;
  i.calls_running = 1;
  i.model_prompt_tokens = static_cast<std::int64_t>(completed * 10);
  i.model_completion_tokens = static_cast<std::int64_t>(completed * 3);
  agentd::ModelStats m;
  m.config_name = "gpt";
  m.calls = completed;
  m.errors = failed;
  m.latency = i.call_latency;
  i.models.push_back(m);
  return ServerSnapshot{address, i, ""};
}

}  // namespace

TEST_CASE("a histogram delta is the observations made between two readings") {
  auto d = histogram_delta(hist({5, 3, 1}, 4.0), hist({2, 3, 0}, 1.5));
  REQUIRE(d);
  CHECK(d->counts == std::vector<std::uint64_t>{3, 0, 1});
  CHECK(d->count == 4);
  CHECK(d->sum == Approx(2.5));
}

TEST_CASE("a histogram that went down (a restart) or changed bounds has no delta") {
  CHECK_FALSE(histogram_delta(hist({1, 0, 0}, 0.1), hist({2, 0, 0}, 0.2)));
  auto other = hist({5, 3, 1}, 4.0);
  other.bounds = {0.2, 1.0, 10.0};
  CHECK_FALSE(histogram_delta(other, hist({2, 3, 0}, 1.5)));
}

TEST_CASE("histograms with the same bounds add up, and other bounds are refused") {
  agentd::Histogram sum;
  REQUIRE(histogram_add(sum, hist({1, 2, 3}, 1)));
  REQUIRE(histogram_add(sum, hist({1, 0, 1}, 2)));
  CHECK(sum.counts == std::vector<std::uint64_t>{2, 2, 4});
  CHECK(sum.count == 8);
  auto other = hist({1, 0, 0}, 0);
  other.bounds = {1, 2, 3};
  CHECK_FALSE(histogram_add(sum, other));
  CHECK(sum.count == 8);
}

TEST_CASE("a sample sums the rates of every server over the interval") {
  std::vector<ServerSnapshot> before = {server("a:1", "A", 10, 1, hist({0, 0, 0}, 0)),
                                        server("b:2", "B", 0, 0, hist({0, 0, 0}, 0))};
  // In 2 s: a finished 8 calls (2 of them failed), all quick; b finished 2, slow ones.
  std::vector<ServerSnapshot> now = {server("a:1", "A", 16, 3, hist({8, 0, 0}, 0.4)),
                                     server("b:2", "B", 2, 0, hist({0, 0, 2}, 10))};
  auto s = make_sample(before, now, 2.0, 1234);
  CHECK(s.t_unix_ms == 1234);
  CHECK(s.calls_per_s == Approx(5.0));           // (8 + 2) / 2
  CHECK(s.failed_per_s == Approx(1.0));          // 2 / 2
  CHECK(s.prompt_tokens_per_s == Approx(40.0));  // (60 + 20) / 2
  CHECK(s.completion_tokens_per_s == Approx(12.0));
  CHECK(s.agents == 14);
  CHECK(s.calls_queued == 4);
  CHECK(s.calls_running == 2);
  // 8 of the 10 calls are in the first bucket (<= 0.1 s): the median is there, p95 in the last.
  REQUIRE(s.latency_p50);
  CHECK(*s.latency_p50 <= 0.1);
  REQUIRE(s.latency_p95);
  CHECK(*s.latency_p95 > 1.0);
  REQUIRE(s.models.count("gpt") == 1);
  CHECK(s.models["gpt"].calls_per_s == Approx(4.0));  // completed 6 + 2 calls counted as model calls
}

TEST_CASE("no calls in the interval: zero rates and no latency") {
  std::vector<ServerSnapshot> both = {server("a:1", "A", 10, 1, hist({3, 0, 0}, 0.1))};
  auto s = make_sample(both, both, 1.0, 0);
  CHECK(s.calls_per_s == 0);
  CHECK_FALSE(s.latency_p50);
  CHECK_FALSE(s.latency_p95);
  CHECK(gateway::console::sample_json(s)["latency_p50"].is_null());
}

TEST_CASE("a server that restarted or is down adds no rates, only its gauges when up") {
  std::vector<ServerSnapshot> before = {server("a:1", "A", 100, 0, hist({100, 0, 0}, 1)),
                                        ServerSnapshot{"b:2", std::nullopt, "connection refused"}};
  std::vector<ServerSnapshot> now = {server("a:1", "A-restarted", 3, 0, hist({3, 0, 0}, 0.1)),
                                     server("b:2", "B", 50, 0, hist({50, 0, 0}, 1))};
  auto s = make_sample(before, now, 1.0, 0);
  CHECK(s.calls_per_s == 0);
  CHECK(s.agents == 14);
  CHECK_FALSE(s.latency_p50);
}
