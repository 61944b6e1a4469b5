#include "server_stats.h"

#include "process_stats.h"
#include "server.h"
#include "state_store.h"

#include <agentd/version.h>

#include <unistd.h>

#include <fmt/format.h>

namespace agentd::detail {

ServerStats Server::stats() const {
  ServerStats s;
  s.server_id = id_;
  s.version = AGENTD_VERSION_STRING;
  s.pid = ::getpid();
  s.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const ProcessStats process = process_stats();
  s.rss_bytes = process.rss_bytes;
  s.cpu_seconds = process.cpu_seconds;
  s.advertise_address = advertise_;
  s.classes = catalog_.names();
  s.model_configs = models_.names();
  s.model_config_version = models_.version();
  s.agents = host_.size();
  s.calls_ok = host_.calls_completed();
  s.calls_error = host_.calls_failed();
  s.calls_by_class = host_.calls_by_class();
  s.calls_queued = host_.queued_calls();
  s.calls_running = host_.running_calls();
  const auto watch = host_.watch_stats();
  s.calls_slow = watch.slow_now;
  s.calls_slow_total = watch.slow_total;
  s.calls_timed_out = watch.timed_out;
  s.python_loop_stalls = plugins_.python_loop_stalls();
  s.latency = host_.call_latency();
  s.tools = tools_.metrics();
  const auto results = host_.result_stats();
  s.result_pool_size = results.size;
  s.result_pool_evictions = results.evictions;
  s.max_pool_size = results.limits.max_size;
  s.max_expire_seconds = results.limits.max_age.count() / 1000.0;
  s.peer_fetches = peers_.fetches();
  const ModelUsage usage = models_.total_usage();
  s.model_calls = usage.calls;
  s.model_errors = usage.errors;
  s.prompt_tokens = usage.prompt_tokens;
  s.completion_tokens = usage.completion_tokens;
  s.models = models_.list();
  s.bytes = bytes_;
  s.workers = workers_.threads();
  s.workers_busy = workers_.busy();
  s.workers_max = workers_.max_threads();
  if (lanes_) {
    s.lanes_open = lanes_->open();
    s.lane_threads = options_.lane_threads;
    s.lane_calls = lanes_->calls();
    s.lanes_refused = lanes_->refused_busy();
  }
  if (store_) {
    const auto st = store_->stats();
    s.state_dir = store_->dir();
    s.state_bytes = st.bytes;
    s.state_last_commit_unix_ms = st.last_commit_unix_ms;
    s.state_error = st.error;
  }
  s.auth_required = requires_token();
  s.tls = serves_tls();
  return s;
}

std::string Server::status_text() const { return detail::status_text(stats()); }

ServerInfo to_server_info(const ServerStats& s) {
  ServerInfo i;
  i.server_id = s.server_id;
  i.version = s.version;
  i.pid = s.pid;
  i.uptime_seconds = s.uptime_seconds;
  i.rss_bytes = s.rss_bytes;
  i.cpu_seconds = s.cpu_seconds;
  i.agent_count = s.agents;
  i.pool_size = s.result_pool_size;
  i.advertise_address = s.advertise_address;
  i.classes = s.classes;
  i.model_configs = s.model_configs;
  i.workers = static_cast<std::uint32_t>(s.workers);
  i.calls_completed = s.calls_ok;
  i.calls_failed = s.calls_error;
  i.calls_queued = s.calls_queued;
  i.max_pool_size = s.max_pool_size;
  i.max_expire_seconds = s.max_expire_seconds;
  i.bytes_client_in = s.bytes.client.in;
  i.bytes_client_out = s.bytes.client.out;
  i.bytes_peer_in = s.bytes.peer.in;
  i.bytes_peer_out = s.bytes.peer.out;
  i.model_config_version = s.model_config_version;
  i.model_calls = s.model_calls;
  i.model_errors = s.model_errors;
  i.model_prompt_tokens = s.prompt_tokens;
  i.model_completion_tokens = s.completion_tokens;
  i.state_dir = s.state_dir;
  i.state_bytes = s.state_bytes;
  i.state_last_commit_unix_ms = s.state_last_commit_unix_ms;
  i.state_error = s.state_error;
  i.workers_busy = static_cast<std::uint32_t>(s.workers_busy);
  i.workers_max = static_cast<std::uint32_t>(s.workers_max);
  i.calls_slow = s.calls_slow;
  i.calls_slow_total = s.calls_slow_total;
  i.calls_timed_out = s.calls_timed_out;
  i.auth_required = s.auth_required;
  i.tls = s.tls;
  i.calls_running = s.calls_running;
  i.lanes_open = static_cast<std::uint32_t>(s.lanes_open);
  i.lane_threads = static_cast<std::uint32_t>(s.lane_threads);
  i.lane_calls = s.lane_calls;
  i.call_latency.bounds.assign(LatencyHistogram::kBounds.begin(), LatencyHistogram::kBounds.end());
  i.call_latency.counts.assign(s.latency.buckets.begin(), s.latency.buckets.end());
  i.call_latency.count = s.latency.count;
  i.call_latency.sum = s.latency.sum;
  for (const ModelInfo& m : s.models) {
    ModelStats out{.config_name = m.config_name,
                   .model_type = m.model_type,
                   .model_name = m.model_name,
                   .calls = m.usage.calls,
                   .errors = m.usage.errors,
                   .prompt_tokens = m.usage.prompt_tokens,
                   .completion_tokens = m.usage.completion_tokens,
                   .latency = {}};
    out.latency.bounds.assign(UsageCounter::kLatencyBounds.begin(), UsageCounter::kLatencyBounds.end());
    out.latency.counts = m.usage.latency_buckets;
    out.latency.counts.resize(out.latency.bounds.size());
    out.latency.count = m.usage.calls;
    out.latency.sum = static_cast<double>(m.usage.latency_ms) / 1000;
    i.models.push_back(std::move(out));
  }
  return i;
}

std::string status_text(const ServerStats& s) {
  return fmt::format(
      "{} agent(s), {} running, {} queued, {} completed, {} failed call(s), "
      "workers {}/{} busy{}",
      s.agents, s.calls_running, s.calls_queued, s.calls_ok, s.calls_error, s.workers_busy, s.workers_max,
      s.calls_slow == 0 ? std::string()
                        : fmt::format(", {} slow call(s) (over --slow-call-warn)", s.calls_slow));
}

}  // namespace agentd::detail
