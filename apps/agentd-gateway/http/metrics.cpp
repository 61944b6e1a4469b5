#include "http/metrics.h"

#include <sstream>

namespace gateway::http {

namespace {

std::string route_of(std::string_view path) {
  for (std::string_view r :
       {"/v1/models", "/v1/chat/completions", "/metrics", "/.well-known/agent-card.json"})
    if (path == r) return std::string(r);
  // A2A: one route for every agent (the agent's id is not a label: ids are unbounded).
  if (path.starts_with("/a2a/")) {
    const auto slash = path.find('/', 5);
    if (slash != std::string_view::npos && slash > 5) {
      const std::string_view tail = path.substr(slash);
      if (tail == "/") return "/a2a/{agent}/";
      if (tail == "/.well-known/agent-card.json") return "/a2a/{agent}/.well-known/agent-card.json";
    }
  }
  return "other";
}

}  // namespace

Metrics& metrics() {
  static Metrics m;
  return m;
}

void Metrics::request(std::string_view path, unsigned status, double seconds) {
  const std::string route = route_of(path);
  std::lock_guard lock(mu_);
  ++requests_[{route, status}];
  Latency& l = latency_[route];
  for (std::size_t i = 0; i < std::size(kBuckets); ++i)
    if (seconds <= kBuckets[i]) ++l.counts[i];
  ++l.count;
  l.sum += seconds;
}

std::string Metrics::text() const {
  std::ostringstream out;
  out << "# HELP agentd_gateway_requests_total HTTP requests answered, by route and status.\n"
         "# TYPE agentd_gateway_requests_total counter\n";
  std::lock_guard lock(mu_);
  for (const auto& [key, n] : requests_)
    out << "agentd_gateway_requests_total{route=\"" << key.first << "\",status=\"" << key.second << "\"} "
        << n << "\n";
  out << "# HELP agentd_gateway_request_duration_seconds Time from a request read to its answer written.\n"
         "# TYPE agentd_gateway_request_duration_seconds histogram\n";
  for (const auto& [route, l] : latency_) {
    for (std::size_t i = 0; i < std::size(kBuckets); ++i)
      out << "agentd_gateway_request_duration_seconds_bucket{route=\"" << route << "\",le=\"" << kBuckets[i]
          << "\"} " << l.counts[i] << "\n";
    out << "agentd_gateway_request_duration_seconds_bucket{route=\"" << route << "\",le=\"+Inf\"} " << l.count
        << "\n"
        << "agentd_gateway_request_duration_seconds_sum{route=\"" << route << "\"} " << l.sum << "\n"
        << "agentd_gateway_request_duration_seconds_count{route=\"" << route << "\"} " << l.count << "\n";
  }
  out << "# HELP agentd_gateway_connections Client connections open.\n"
         "# TYPE agentd_gateway_connections gauge\n"
         "agentd_gateway_connections "
      << connections_.load() << "\n"
      << "# HELP agentd_gateway_streams Streamed answers (server-sent events) open.\n"
         "# TYPE agentd_gateway_streams gauge\n"
         "agentd_gateway_streams "
      << streams_.load() << "\n"
      << "# HELP agentd_gateway_tls_handshake_failures_total TLS handshakes with clients that failed or "
         "timed out.\n"
         "# TYPE agentd_gateway_tls_handshake_failures_total counter\n"
         "agentd_gateway_tls_handshake_failures_total "
      << tls_handshake_failures_.load() << "\n";
  return out.str();
}

}  // namespace gateway::http
