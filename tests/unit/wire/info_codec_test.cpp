// info_codec: ServerInfo and AgentInfo come back from their wire form field for field, and a
// field added to the schema fails here until the codec writes and reads it.
#include "info_codec.h"

#include <capnp/message.h>
#include <capnp/schema.h>
#include <catch2/catch.hpp>

namespace detail = agentd::detail;
namespace wire = agentd::wire;
using agentd::AgentInfo;
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
  // The checks above name every field the schema has: a new one is written, read and checked.
  CHECK(capnp::Schema::from<wire::ServerInfo>().getFields().size() == 35);
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
                    .failed_calls = 5};
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
  CHECK(capnp::Schema::from<wire::AgentInfo>().getFields().size() == 6);
}
