#include "trace_file.h"

#include <agentd/error.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

namespace agentd::detail {

namespace {

// FNV-1a, 64 bits, from a given basis: stable across builds and platforms.
std::uint64_t fnv1a(const std::string& s, std::uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// The ids of a call: derived from its call id (or, without one, its agent and sequence number).
std::string trace_id_of(const std::string& key) {
  return fmt::format("{:016x}{:016x}", fnv1a(key, 0xcbf29ce484222325ULL), fnv1a(key, 0x84222325cbf29ce4ULL));
}
std::string span_id_of(const std::string& key) {
  return fmt::format("{:016x}", fnv1a(key + "/span", 0xcbf29ce484222325ULL));
}

nlohmann::ordered_json string_attr(const char* key, const std::string& value) {
  return {{"key", key}, {"value", {{"stringValue", value}}}};
}
nlohmann::ordered_json int_attr(const char* key, std::int64_t value) {
  // OTLP JSON encodes 64-bit integers as strings.
  return {{"key", key}, {"value", {{"intValue", std::to_string(value)}}}};
}

}  // namespace

std::string span_json_line(const SpanRecord& s, const std::string& server_id) {
  std::string key = !s.call_id.empty() ? s.call_id : fmt::format("{}#{}#{}", server_id, s.agent_id, s.seq);
  std::int64_t start = s.enqueued_unix_ns + s.queue_wait_ns;
  auto attrs = nlohmann::ordered_json::array({
      string_attr("agentd.call_id", s.call_id),
      string_attr("agentd.agent_id", s.agent_id),
      string_attr("agentd.agent_class", s.agent_class),
      string_attr("agentd.kind", s.kind),
      {{"key", "agentd.consumed"},
       {"value",
        {{"arrayValue",
          {{"values",
            [&] {
              auto v = nlohmann::ordered_json::array();
              for (const auto& c : s.consumed) v.push_back({{"stringValue", c}});
              return v;
            }()}}}}}},
      int_attr("agentd.queue_wait_ns", s.queue_wait_ns),
      int_attr("agentd.run_ns", s.run_ns),
      int_attr("agentd.model_calls", static_cast<std::int64_t>(s.model_calls)),
      int_attr("agentd.model_prompt_tokens", s.prompt_tokens),
      int_attr("agentd.model_completion_tokens", s.completion_tokens),
      string_attr("agentd.outcome", s.outcome),
      string_attr("agentd.server_id", server_id),
  });
  if (!s.method.empty()) attrs.push_back(string_attr("agentd.method", s.method));
  // The caller's trace (e.g. an HTTP request's W3C trace-id) as an attribute: traceId stays the
  // one derived from the call id, which the links of the calls consuming this one name.
  if (!s.trace_id.empty()) attrs.push_back(string_attr("agentd.trace_id", s.trace_id));
  auto links = nlohmann::ordered_json::array();
  for (const auto& c : s.consumed) links.push_back({{"traceId", trace_id_of(c)}, {"spanId", span_id_of(c)}});
  nlohmann::ordered_json status = {{"code", s.outcome == "ok" ? "STATUS_CODE_OK" : "STATUS_CODE_ERROR"}};
  if (!s.error_message.empty()) status["message"] = s.error_message;
  nlohmann::ordered_json line{
      {"traceId", trace_id_of(key)},
      {"spanId", span_id_of(key)},
      {"name", "agentd.call"},
      {"kind", "SPAN_KIND_INTERNAL"},
      {"startTimeUnixNano", std::to_string(start)},
      {"endTimeUnixNano", std::to_string(start + s.run_ns)},
      {"attributes", std::move(attrs)},
      {"links", std::move(links)},
      {"status", std::move(status)},
  };
  // Its MCP tool calls as span events, one per call, at the time each was sent.
  if (!s.tool_calls.empty()) {
    auto events = nlohmann::ordered_json::array();
    for (const auto& t : s.tool_calls) {
      auto a = nlohmann::ordered_json::array({string_attr("agentd.tool", t.tool),
                                              int_attr("agentd.tool_duration_ns", t.duration_ns),
                                              string_attr("agentd.tool_outcome", t.outcome)});
      if (!t.error_message.empty()) a.push_back(string_attr("agentd.tool_error", t.error_message));
      events.push_back({{"timeUnixNano", std::to_string(t.start_unix_ns)},
                        {"name", "agentd.tool_call"},
                        {"attributes", std::move(a)}});
    }
    line["events"] = std::move(events);
  }
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

TraceFile::TraceFile(const std::string& path, std::string server_id)
    : path_(path), server_id_(std::move(server_id)) {
  file_ = std::fopen(path.c_str(), "ae");
  if (file_ == nullptr)
    throw Error(ErrorCode::config_error,
                fmt::format("--trace-file {}: cannot open for appending: {}", path, std::strerror(errno)));
}

TraceFile::~TraceFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void TraceFile::write(const SpanRecord& span) {
  std::string line = span_json_line(span, server_id_);
  line += '\n';
  std::lock_guard lock(mu_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    if (!failed_) spdlog::error("--trace-file {}: write failed: {}", path_, std::strerror(errno));
    failed_ = true;
  }
}

}  // namespace agentd::detail
