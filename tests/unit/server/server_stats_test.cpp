// server_stats: one snapshot, three projections. STATUS= reads as it always has (with the slow
// calls only when there are some), the wire's ServerInfo carries each counter under its own
// name, and the Prometheus text of the same snapshot agrees with both.
#include "server_stats.h"

#include "metrics.h"

#include <catch2/catch.hpp>

using agentd::detail::render_metrics;
using agentd::detail::ServerStats;
using agentd::detail::status_text;
using agentd::detail::to_server_info;
using Catch::Matchers::Contains;

namespace {

ServerStats stats_sample() {
  ServerStats s;
  s.server_id = "srv-1";
  s.version = "1.2.3";
  s.pid = 77;
  s.uptime_seconds = 5.5;
  s.rss_bytes = 4096;
  s.cpu_seconds = 0.25;
  s.advertise_address = "host:7000";
  s.classes = {"EchoAgent"};
  s.model_configs = {"echo"};
  s.model_config_version = 3;
  s.agents = 4;
  s.calls_ok = 10;
  s.calls_error = 2;
  s.calls_by_class["EchoAgent"] = {10, 2};
  s.calls_queued = 6;
  s.calls_running = 1;
  s.calls_slow_total = 8;
  s.calls_timed_out = 9;
  s.result_pool_size = 11;
  s.result_pool_evictions = 12;
  s.max_pool_size = 8192;
  s.max_expire_seconds = 7200;
  s.peer_fetches = 13;
  s.model_calls = 14;
  s.model_errors = 15;
  s.prompt_tokens = 16;
  s.completion_tokens = 17;
  s.bytes.client.in = 18;
  s.bytes.client.out = 19;
  s.bytes.peer.in = 20;
  s.bytes.peer.out = 21;
  s.workers = 22;
  s.workers_busy = 3;
  s.workers_max = 64;
  s.lanes_open = 25;
  s.lane_threads = 26;
  s.lane_calls = 27;
  s.lanes_refused = 28;
  s.state_dir = "/var/lib/agentd";
  s.state_bytes = 23;
  s.state_last_commit_unix_ms = 24;
  s.state_error = "";
  return s;
}

}  // namespace

TEST_CASE("STATUS= text names agents, calls and workers, and slow calls only when there are some",
          "[server_stats]") {
  ServerStats s = stats_sample();
  CHECK(status_text(s) ==
        "4 agent(s), 1 running, 6 queued, 10 completed, 2 failed call(s), workers 3/64 busy");
  s.calls_slow = 5;
  CHECK(status_text(s) ==
        "4 agent(s), 1 running, 6 queued, 10 completed, 2 failed call(s), "
        "workers 3/64 busy, 5 slow call(s) (over --slow-call-warn)");
}

TEST_CASE("the wire's server info carries each counter of the snapshot", "[server_stats]") {
  ServerStats s = stats_sample();
  s.calls_slow = 5;
  const agentd::ServerInfo i = to_server_info(s);
  CHECK(i.server_id == "srv-1");
  CHECK(i.version == "1.2.3");
  CHECK(i.pid == 77);
  CHECK(i.uptime_seconds == 5.5);
  CHECK(i.rss_bytes == 4096);
  CHECK(i.cpu_seconds == 0.25);
  CHECK(i.agent_count == 4);
  CHECK(i.pool_size == 11);
  CHECK(i.advertise_address == "host:7000");
  CHECK(i.classes == std::vector<std::string>{"EchoAgent"});
  CHECK(i.model_configs == std::vector<std::string>{"echo"});
  CHECK(i.workers == 22);
  CHECK(i.calls_completed == 10);
  CHECK(i.calls_failed == 2);
  CHECK(i.calls_queued == 6);
  CHECK(i.max_pool_size == 8192);
  CHECK(i.max_expire_seconds == 7200);
  CHECK(i.bytes_client_in == 18);
  CHECK(i.bytes_client_out == 19);
  CHECK(i.bytes_peer_in == 20);
  CHECK(i.bytes_peer_out == 21);
  CHECK(i.model_config_version == 3);
  CHECK(i.model_calls == 14);
  CHECK(i.model_errors == 15);
  CHECK(i.model_prompt_tokens == 16);
  CHECK(i.model_completion_tokens == 17);
  CHECK(i.state_dir == "/var/lib/agentd");
  CHECK(i.state_bytes == 23);
  CHECK(i.state_last_commit_unix_ms == 24);
  CHECK(i.state_error.empty());
  CHECK(i.workers_busy == 3);
  CHECK(i.workers_max == 64);
  CHECK(i.calls_slow == 5);
  CHECK(i.calls_slow_total == 8);
  CHECK(i.calls_timed_out == 9);
  CHECK(i.lanes_open == 25);
  CHECK(i.lane_threads == 26);
  CHECK(i.lane_calls == 27);
}

TEST_CASE("/metrics renders the same snapshot", "[server_stats]") {
  const std::string text = render_metrics(stats_sample());
  CHECK_THAT(text, Contains("agentd_agents 4\n"));
  CHECK_THAT(text, Contains("agentd_calls_total{outcome=\"ok\"} 10\n"));
  CHECK_THAT(text, Contains("agentd_calls_total{outcome=\"error\"} 2\n"));
  CHECK_THAT(text, Contains("agentd_calls_queued 6\n"));
  CHECK_THAT(text, Contains("agentd_workers_busy 3\n"));
  CHECK_THAT(text, Contains("agentd_workers_max 64\n"));
  CHECK_THAT(text, Contains("agentd_bytes_total{conn=\"peer\",dir=\"out\"} 21\n"));
  CHECK_THAT(text, Contains("agentd_lanes_open 25\n"));
  CHECK_THAT(text, Contains("agentd_lane_calls_total 27\n"));
  CHECK_THAT(text, Contains("agentd_lanes_refused_total 28\n"));
}
