#include "console/console_json.h"

#include "openai/chat_mapping.h"

namespace gateway::console {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json agent_row(const agentd::AgentInfo& a, const std::string& server) {
  return {{"id", a.id},
          {"name", a.name},
          {"class", a.class_name},
          {"server", server},
          {"calls", a.completed_calls + a.failed_calls},
          {"errors", a.failed_calls},
          {"queued", a.queued_calls},
          {"last_call_unix_ms", a.last_call_unix_ms},
          {"model_calls", a.model_calls},
          {"prompt_tokens", a.prompt_tokens},
          {"completion_tokens", a.completion_tokens}};
}

// The MCP tool calls a span's agent call made, in order (agentctl trace --json shows the same).
json tool_calls_json(const std::vector<agentd::ToolCallSpan>& calls) {
  json out = json::array();
  for (const auto& t : calls)
    out.push_back({{"tool", t.tool},
                   {"start_unix_us", t.start_unix_ns / 1000},
                   {"duration_us", t.duration_ns / 1000},
                   {"outcome", t.outcome},
                   {"error_message", t.error_message}});
  return out;
}

json span_json(const agentd::TraceSpan& s, const std::string& server) {
  return {{"server", server},
          {"seq", s.seq},
          {"call_id", s.call_id},
          {"agent_id", s.agent_id},
          {"agent_class", s.agent_class},
          {"kind", s.kind},
          {"method", s.method},
          {"consumed", s.consumed},
          {"enqueued_unix_us", s.enqueued_unix_ns / 1000},
          {"queue_wait_us", s.queue_wait_ns / 1000},
          {"run_us", s.run_ns / 1000},
          {"outcome", s.outcome},
          {"error_message", s.error_message},
          {"model_calls", s.model_calls},
          {"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"trace_id", s.trace_id},
          {"input", s.input},
          {"output", s.output},
          {"tool_calls", tool_calls_json(s.tool_calls)}};
}

json message_json(const agentd::Msg& m) {
  return {{"name", m.name},
          {"role", m.role},
          {"content", m.text()},
          {"metadata", m.metadata.is_object() ? m.metadata : json(nullptr)}};
}

json overview_json(json gateway, const std::vector<ServerSnapshot>& servers) {
  json list = json::array();
  std::uint64_t up = 0, agents = 0, running = 0, queued = 0, completed = 0, failed = 0;
  for (const auto& s : servers) {
    json row;
    if (!s.info) {
      row = {{"address", s.address},
             {"up", false},
             {"down_reason", s.down_reason},
             {"server_id", ""},
             {"version", ""},
             {"uptime_seconds", 0},
             {"agents", 0},
             {"calls_running", 0},
             {"calls_queued", 0},
             {"calls_completed", 0},
             {"calls_failed", 0},
             {"calls_timed_out", 0},
             {"workers", 0},
             {"workers_busy", 0},
             {"workers_max", 0},
             {"rss_bytes", 0},
             {"cpu_seconds", 0},
             {"state_dir", ""},
             {"state_last_commit_unix_ms", 0},
             {"state_error", ""},
             {"tls", false},
             {"auth", false},
             {"model_calls", 0},
             {"prompt_tokens", 0},
             {"completion_tokens", 0},
             {"classes", json::array()},
             {"model_configs", json::array()}};
      list.push_back(std::move(row));
      continue;
    }
    const agentd::ServerInfo& i = *s.info;
    ++up;
    agents += i.agent_count;
    running += i.calls_running;
    queued += i.calls_queued;
    completed += i.calls_completed;
    failed += i.calls_failed;
    list.push_back({{"address", s.address},
                    {"up", true},
                    {"down_reason", ""},
                    {"server_id", i.server_id},
                    {"version", i.version},
                    {"uptime_seconds", i.uptime_seconds},
                    {"agents", i.agent_count},
                    {"calls_running", i.calls_running},
                    {"calls_queued", i.calls_queued},
                    {"calls_completed", i.calls_completed},
                    {"calls_failed", i.calls_failed},
                    {"calls_timed_out", i.calls_timed_out},
                    {"workers", i.workers},
                    {"workers_busy", i.workers_busy},
                    {"workers_max", i.workers_max},
                    {"rss_bytes", i.rss_bytes},
                    {"cpu_seconds", i.cpu_seconds},
                    {"state_dir", i.state_dir},
                    {"state_last_commit_unix_ms", i.state_last_commit_unix_ms},
                    {"state_error", i.state_error},
                    {"tls", i.tls},
                    {"auth", i.auth_required},
                    {"model_calls", i.model_calls},
                    {"prompt_tokens", i.model_prompt_tokens},
                    {"completion_tokens", i.model_completion_tokens},
                    {"classes", i.classes},
                    {"model_configs", i.model_configs}});
  }
  json out;
  out["gateway"] = std::move(gateway);
  out["servers"] = std::move(list);
  out["totals"] = {{"servers", servers.size()}, {"servers_up", up},       {"agents", agents},
                   {"calls_running", running},  {"calls_queued", queued}, {"calls_completed", completed},
                   {"calls_failed", failed}};
  return out;
}

namespace {

json quantile_or_null(const agentd::Histogram& h, double q) {
  auto v = h.quantile(q);  // none without observations
  return v ? json(*v) : json(nullptr);
}

}  // namespace

json models_json(const std::vector<ServerSnapshot>& servers) {
  json list = json::array();
  for (const auto& s : servers) {
    if (!s.info) continue;
    for (const auto& m : s.info->models) {
      const auto& h = m.latency;
      list.push_back({{"server", s.address},
                      {"config_name", m.config_name},
                      {"model_type", m.model_type},
                      {"model_name", m.model_name},
                      {"calls", m.calls},
                      {"errors", m.errors},
                      {"prompt_tokens", m.prompt_tokens},
                      {"completion_tokens", m.completion_tokens},
                      {"latency",
                       {{"p50", quantile_or_null(h, 0.5)},
                        {"p95", quantile_or_null(h, 0.95)},
                        {"p99", quantile_or_null(h, 0.99)},
                        {"mean", h.count ? json(h.sum / static_cast<double>(h.count)) : json(nullptr)}}}});
    }
  }
  return {{"models", std::move(list)}};
}

ErrorAnswer upstream_error(const agentd::Error& e) {
  auto r = openai::error_reply(e, "");
  if (e.code() == agentd::ErrorCode::unknown_agent) {
    json body = json::parse(r.body, nullptr, false);
    if (body.is_object() && body.contains("error")) body["error"]["code"] = "unknown_agent";
    r.body = dump(body);
  }
  return {r.status, std::move(r.body)};
}

}  // namespace gateway::console
