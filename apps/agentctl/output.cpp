#include "output.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <utility>

#include <fmt/format.h>

namespace agentctl {

using agentd::Value;

// Columns padded to their widest cell, two spaces apart; the last column is not padded.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      out += cells[i];
      if (i + 1 < cells.size()) out += std::string(width[i] - cells[i].size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

namespace {

// "key   value" lines with the keys aligned.
void print_fields(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::size_t w = 0;
  for (const auto& [k, v] : fields) w = std::max(w, k.size());
  for (const auto& [k, v] : fields) std::cout << k << std::string(w - k.size() + 2, ' ') << v << "\n";
}

}  // namespace

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string human_seconds(double s) {
  if (s < 120) return fmt::format("{:.1f} s", s);
  auto total = static_cast<std::int64_t>(s);
  if (total < 7200) return fmt::format("{}m{:02}s", total / 60, total % 60);
  if (total < 172800) return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
  return fmt::format("{}d{:02}h", total / 86400, (total % 86400) / 3600);
}

namespace {

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// One line of a message's content for a table: text as is, other values as compact JSON.
std::string one_line(const agentd::Msg& m, std::size_t max = 72) {
  std::string t = m.text();
  for (auto& c : t)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (t.size() > max) t = t.substr(0, max - 3) + "...";
  return t;
}

}  // namespace

// Servers refuse text that is not UTF-8, so nothing is replaced here; an older server's bytes
// come out as U+FFFD rather than failing the whole listing.
void print_json(const Value& v) {
  std::cout << v.dump(2, ' ', false, Value::error_handler_t::replace) << "\n";
}

Value agent_json(const agentd::AgentInfo& a) {
  return {{"id", a.id},
          {"name", a.name},
          {"class", a.class_name},
          {"queued_calls", a.queued_calls},
          {"completed_calls", a.completed_calls},
          {"failed_calls", a.failed_calls}};
}

Value server_json(const agentd::ServerInfo& i) {
  return {
      {"server_id", i.server_id},
      {"address", i.advertise_address},
      {"version", i.version},
      {"pid", i.pid},
      {"uptime_seconds", i.uptime_seconds},
      {"cpu_seconds", i.cpu_seconds},
      {"rss_bytes", i.rss_bytes},
      {"agents", i.agent_count},
      {"workers", i.workers},
      {"workers_busy", i.workers_busy},
      {"workers_max", i.workers_max},
      {"lanes", {{"open", i.lanes_open}, {"max", i.lane_threads}, {"calls", i.lane_calls}}},
      {"calls",
       {{"completed", i.calls_completed},
        {"failed", i.calls_failed},
        {"queued", i.calls_queued},
        {"slow", i.calls_slow},
        {"slow_total", i.calls_slow_total},
        {"timed_out", i.calls_timed_out}}},
      {"pool",
       {{"size", i.pool_size}, {"max_size", i.max_pool_size}, {"max_expire_seconds", i.max_expire_seconds}}},
      {"classes", i.classes},
      {"model_configs", i.model_configs},
      {"model_usage",
       {{"config_version", i.model_config_version},
        {"calls", i.model_calls},
        {"errors", i.model_errors},
        {"prompt_tokens", i.model_prompt_tokens},
        {"completion_tokens", i.model_completion_tokens}}},
      {"bytes",
       {{"client_in", i.bytes_client_in},
        {"client_out", i.bytes_client_out},
        {"peer_in", i.bytes_peer_in},
        {"peer_out", i.bytes_peer_out}}},
      {"state",
       {{"dir", i.state_dir},
        {"bytes", i.state_bytes},
        {"last_commit_unix_ms", i.state_last_commit_unix_ms},
        {"error", i.state_error}}}};
}

namespace {

// "DIR, 1.2 MiB, last commit 3 s ago" (or why it stopped saving); "memory only" without one.
std::string state_text(const agentd::ServerInfo& i) {
  if (i.state_dir.empty()) return "memory only (no --state-dir: a restart loses the agents)";
  std::string last = "no commit since start";
  if (i.state_last_commit_unix_ms > 0) {
    using namespace std::chrono;
    const auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
    last = "last commit " + human_seconds(std::max<double>(0, (now - i.state_last_commit_unix_ms) / 1000.0)) +
           " ago";
  }
  std::string out = fmt::format("{}, {}, {}", i.state_dir, human_bytes(i.state_bytes), last);
  if (!i.state_error.empty()) out += "; NOT SAVING: " + i.state_error;
  return out;
}

}  // namespace

Value span_json(const agentd::TraceSpan& s) {
  Value out = {{"seq", s.seq},
               {"call_id", s.call_id},
               {"agent_id", s.agent_id},
               {"agent_class", s.agent_class},
               {"kind", s.kind},
               {"method", s.method},
               {"consumed", s.consumed},
               {"enqueued_unix_ns", s.enqueued_unix_ns},
               {"queue_wait_ns", s.queue_wait_ns},
               {"run_ns", s.run_ns},
               {"model_calls", s.model_calls},
               {"prompt_tokens", s.prompt_tokens},
               {"completion_tokens", s.completion_tokens},
               {"outcome", s.outcome},
               {"error_message", s.error_message},
               {"trace_id", s.trace_id},
               {"input", s.input},
               {"output", s.output}};
  if (!s.tool_calls.empty())
    out["tool_calls"] = json_array(s.tool_calls, [](const agentd::ToolCallSpan& t) {
      Value v = {{"tool", t.tool},
                 {"start_unix_ns", t.start_unix_ns},
                 {"duration_ns", t.duration_ns},
                 {"outcome", t.outcome}};
      if (!t.error_message.empty()) v["error_message"] = t.error_message;
      return v;
    });
  return out;
}

Value servers_json(const std::vector<LocalServer>& servers) {
  return json_array(servers, [](const LocalServer& s) { return s.to_json(); });
}

Value created_json(const agentd::AgentRef& ref, const std::string& address) {
  return {{"id", ref.id()}, {"name", ref.name()}, {"class", ref.class_name()}, {"server", address}};
}

void print_server_info(const agentd::ServerInfo& i) {
  print_fields({
      {"server", i.server_id},
      {"address", i.advertise_address},
      {"version", i.version},
      {"pid", std::to_string(i.pid)},
      {"uptime", human_seconds(i.uptime_seconds)},
      {"cpu", fmt::format("{:.2f} s", i.cpu_seconds)},
      {"rss", human_bytes(i.rss_bytes)},
      {"agents", std::to_string(i.agent_count)},
      {"calls",
       fmt::format("{} completed, {} failed, {} queued", i.calls_completed, i.calls_failed, i.calls_queued)},
      {"workers", fmt::format("{} threads, {} / {} busy{}", i.workers, i.workers_busy, i.workers_max,
                              i.workers_max != 0 && i.workers_busy >= i.workers_max
                                  ? " (all busy: further blocking calls wait)"
                                  : "")},
      {"slow", fmt::format("{} call(s) now, {} ever (over --slow-call-warn); {} timed out", i.calls_slow,
                           i.calls_slow_total, i.calls_timed_out)},
      {"pool", fmt::format("{} / {} results, kept {} s", i.pool_size, i.max_pool_size, i.max_expire_seconds)},
      {"classes",
       i.classes.empty() ? "(none: start as_server with --plugin or --plugin-dir)" : join(i.classes, ", ")},
      {"models", fmt::format("{} (config version {})", join(i.model_configs, ", "), i.model_config_version)},
      {"model use", fmt::format("{} calls, {} failed, {} prompt + {} completion tokens", i.model_calls,
                                i.model_errors, i.model_prompt_tokens, i.model_completion_tokens)},
      {"traffic", fmt::format("clients {} in / {} out, peers {} in / {} out", human_bytes(i.bytes_client_in),
                              human_bytes(i.bytes_client_out), human_bytes(i.bytes_peer_in),
                              human_bytes(i.bytes_peer_out))},
      {"state", state_text(i)},
  });
}

void print_agents(const std::vector<agentd::AgentInfo>& agents) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : agents)
    rows.push_back({a.id, a.name, a.class_name, std::to_string(a.queued_calls),
                    std::to_string(a.completed_calls), std::to_string(a.failed_calls)});
  print_table({"ID", "NAME", "CLASS", "QUEUED", "COMPLETED", "FAILED"}, rows);
}

void print_memory(const std::vector<agentd::Msg>& memory) {
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < memory.size(); ++i)
    rows.push_back(
        {std::to_string(i + 1), memory[i].timestamp, memory[i].name, memory[i].role, one_line(memory[i])});
  print_table({"#", "TIME", "NAME", "ROLE", "CONTENT"}, rows);
}

void print_spans(const std::vector<agentd::TraceSpan>& spans) {
  auto ms = [](std::int64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); };
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : spans)
    rows.push_back({std::to_string(s.seq), s.call_id.empty() ? "-" : s.call_id, s.agent_id, s.agent_class,
                    s.method.empty() ? s.kind : s.kind + ":" + s.method,
                    s.consumed.empty() ? "-" : join(s.consumed, ","), ms(s.queue_wait_ns), ms(s.run_ns),
                    s.outcome, s.trace_id.empty() ? "-" : s.trace_id});
  print_table(
      {"SEQ", "CALL_ID", "AGENT", "CLASS", "KIND", "CONSUMED", "WAIT_MS", "RUN_MS", "OUTCOME", "TRACE_ID"},
      rows);
}

void print_servers(const std::vector<LocalServer>& servers, bool show_state) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : servers) {
    if (s.kind != LocalServer::kServer) continue;
    rows.push_back({s.address(), std::to_string(s.pid), s.server_id, s.log_path});
    if (show_state) rows.back().insert(rows.back().begin() + 2, s.alive ? "running" : "dead");
  }
  if (!rows.empty() || servers.empty()) {
    if (show_state)
      print_table({"ADDRESS", "PID", "STATE", "SERVER_ID", "LOG"}, rows);
    else
      print_table({"ADDRESS", "PID", "SERVER_ID", "LOG"}, rows);
  }
  for (const auto& g : servers)
    if (g.kind == LocalServer::kGateway)
      std::cout << fmt::format("agentd-gateway {} (pid {}{}, log {})\n", g.url, g.pid,
                               show_state ? (g.alive ? ", running" : ", dead") : "", g.log_path);
}

}  // namespace agentctl
