// info_codec: ServerInfo and AgentInfo come back from their wire form field for field, and a
// field added to the schema fails here until the codec writes and reads it.
#include "info_codec.h"

#include <capnp/message.h>
#include <capnp/schema.h>
#include <catch2/catch.hpp>

namespace detail = agentd::detail;
namespace wire = agentd::wire;
using agentd::AgentInfo;
using agentd::Histogram;
using agentd::ModelStats;
using agentd::ServerInfo;

namespace {

ServerInfo sample_server() {
  ServerInfo s;
  s.server_id = "srv-1";
  s.version = "9.8.7";
  s.pid = 4242;
  s.uptime_seconds = 12.5;
  s.rss_bytes = 1u << 30;
  s.cpu_seconds = 3.25;
  s.agent_count = 7;
  s.pool_size = 8;
  s.advertise_address = "[::1]:7000";
  s.classes = {"EchoAgent", "Planner"};
  s.model_configs = {"echo", "gpt"};
  s.workers = 9;
  s.calls_completed = 10;
  s.calls_failed = 11;
  s.calls_queued = 12;
  s.max_pool_size = 13;
  s.max_expire_seconds = 14.5;
  s.bytes_client_in = 15;
  s.bytes_client_out = 16;
  s.bytes_peer_in = 17;
  s.bytes_peer_out = 18;
  s.model_config_version = 19;
  s.model_calls = 20;
  s.model_errors = 21;
  s.model_prompt_tokens = -22;  // signed on the wire
  s.model_completion_tokens = 23;
  s.state_dir = "/var/lib/agentd";
  s.state_bytes = 24;
  s.state_last_commit_unix_ms = 25;
  s.state_error = "disk full";
  s.workers_busy = 26;
  s.workers_max = 27;
  s.calls_slow = 28;
  s.calls_slow_total = 29;
  s.calls_timed_out = 30;
  s.auth_required = true;
  s.tls = true;
  s.calls_running = 6;
  s.lanes_open = 3;
  s.lane_threads = 16;
  s.lane_calls = 1234;
  s.call_latency = Histogram{.bounds = {0.001, 0.01}, .counts = {3, 4}, .count = 9, .sum = 0.25};
  s.models = {
      ModelStats{.config_name = "gpt",
                 .model_type = "openai_chat",
                 .model_name = "gpt-4o",
                 .calls = 10,
                 .errors = 2,
                 .prompt_tokens = 1000,
                 .completion_tokens = 500,
                 .latency = Histogram{.bounds = {0.5, 5}, .counts = {7, 3}, .count = 10, .sum = 9.5}}};
  return s;
}

}  // namespace

TEST_CASE("server info survives the trip through its wire form", "[info_codec]") {
  const ServerInfo s = sample_server();
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::ServerInfo>();
  detail::write_server_info(s, root);
  const ServerInfo back = detail::read_server_info(root.asReader());
  CHECK(back.server_id == s.server_id);
  CHECK(back.version == s.version);
  CHECK(back.pid == s.pid);
  CHECK(back.uptime_seconds == s.uptime_seconds);
  CHECK(back.rss_bytes == s.rss_bytes);
  CHECK(back.cpu_seconds == s.cpu_seconds);
  CHECK(back.agent_count == s.agent_count);
  CHECK(back.pool_size == s.pool_size);
  CHECK(back.advertise_address == s.advertise_address);
  CHECK(back.classes == s.classes);
  CHECK(back.model_configs == s.model_configs);
  CHECK(back.workers == s.workers);
  CHECK(back.calls_completed == s.calls_completed);
  CHECK(back.calls_failed == s.calls_failed);
  CHECK(back.calls_queued == s.calls_queued);
  CHECK(back.max_pool_size == s.max_pool_size);
  CHECK(back.max_expire_seconds == s.max_expire_seconds);
  CHECK(back.bytes_client_in == s.bytes_client_in);
  CHECK(back.bytes_client_out == s.bytes_client_out);
  CHECK(back.bytes_peer_in == s.bytes_peer_in);
  CHECK(back.bytes_peer_out == s.bytes_peer_out);
  CHECK(back.model_config_version == s.model_config_version);
  CHECK(back.model_calls == s.model_calls);
  CHECK(back.model_errors == s.model_errors);
  CHECK(back.model_prompt_tokens == s.model_prompt_tokens);
  CHECK(back.model_completion_tokens == s.model_completion_tokens);
  CHECK(back.state_dir == s.state_dir);
  CHECK(back.state_bytes == s.state_bytes);
  CHECK(back.state_last_commit_unix_ms == s.state_last_commit_unix_ms);
  CHECK(back.state_error == s.state_error);
  CHECK(back.workers_busy == s.workers_busy);
  CHECK(back.workers_max == s.workers_max);
  CHECK(back.calls_slow == s.calls_slow);
  CHECK(back.calls_slow_total == s.calls_slow_total);
  CHECK(back.calls_timed_out == s.calls_timed_out);
  CHECK(back.auth_required == s.auth_required);
  CHECK(back.tls == s.tls);
  CHECK(back.calls_running == s.calls_running);
  CHECK(back.lanes_open == s.lanes_open);
  CHECK(back.lane_threads == s.lane_threads);
  CHECK(back.lane_calls == s.lane_calls);
  CHECK(back.call_latency.bounds == s.call_latency.bounds);
  CHECK(back.call_latency.counts == s.call_latency.counts);
  CHECK(back.call_latency.count == s.call_latency.count);
  CHECK(back.call_latency.sum == s.call_latency.sum);
  REQUIRE(back.models.size() == 1);
  const ModelStats& m = back.models[0];
  CHECK(m.config_name == "gpt");
  CHECK(m.model_type == "openai_chat");
  CHECK(m.model_name == "gpt-4o");
  CHECK(m.calls == 10);
  CHECK(m.errors == 2);
  CHECK(m.prompt_tokens == 1000);
  CHECK(m.completion_tokens == 500);
  CHECK(m.latency.counts == std::vector<std::uint64_t>{7, 3});
  CHECK(m.latency.bounds == std::vector<double>{0.5, 5});
  CHECK(m.latency.count == 10);
  CHECK(m.latency.sum == 9.5);
  // The checks above name every field the schema has: a new one is written, read and checked.
  CHECK(capnp::Schema::from<wire::ServerInfo>().getFields().size() == 43);
  CHECK(capnp::Schema::from<wire::ModelStats>().getFields().size() == 8);
  CHECK(capnp::Schema::from<wire::Histogram>().getFields().size() == 4);
}

TEST_CASE("an empty server info reads back empty", "[info_codec]") {
  capnp::MallocMessageBuilder mb;
  detail::write_server_info(ServerInfo{}, mb.initRoot<wire::ServerInfo>());
  const ServerInfo back = detail::read_server_info(mb.getRoot<wire::ServerInfo>().asReader());
  CHECK(back.server_id.empty());
  CHECK(back.classes.empty());
  CHECK(back.state_dir.empty());
  CHECK(back.calls_timed_out == 0);
}

TEST_CASE("agent info survives the trip through its wire form", "[info_codec]") {
  const AgentInfo a{.id = "a-1",
                    .name = "planner",
                    .class_name = "Planner",
                    .queued_calls = 3,
                    .completed_calls = 1ull << 40,
                    .failed_calls = 5,
                    .last_call_unix_ms = 1'700'000'000'123,
                    .model_calls = 7,
                    .prompt_tokens = 70,
                    .completion_tokens = 35};
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::AgentInfo>();
  detail::write_agent_info(a, root);
  const AgentInfo back = detail::read_agent_info(root.asReader());
  CHECK(back.id == a.id);
  CHECK(back.name == a.name);
  CHECK(back.class_name == a.class_name);
  CHECK(back.queued_calls == a.queued_calls);
  CHECK(back.completed_calls == a.completed_calls);
  CHECK(back.failed_calls == a.failed_calls);
  CHECK(back.last_call_unix_ms == a.last_call_unix_ms);
  CHECK(back.model_calls == a.model_calls);
  CHECK(back.prompt_tokens == a.prompt_tokens);
  CHECK(back.completion_tokens == a.completion_tokens);
  CHECK(capnp::Schema::from<wire::AgentInfo>().getFields().size() == 10);
}

TEST_CASE("a histogram whose counts do not match its bounds reads back with one count per bound",
          "[info_codec]") {
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::Histogram>();
  auto bounds = root.initBounds(2);
  bounds.set(0, 0.1);
  bounds.set(1, 1);
  root.initCounts(5);
  const Histogram back = detail::read_histogram(root.asReader());
  CHECK(back.counts.size() == 2);
}
