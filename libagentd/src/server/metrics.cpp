#include "metrics.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <iterator>

namespace agentd::detail {

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void sample(std::string& out, const char* name, const char* labels, T value) {
  if (*labels)
    fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels, value);
  else
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
}

}  // namespace

std::string render_metrics(const MetricsSnapshot& s) {
  std::string o;
  metric(o, "agentd_agents", "gauge", "Agents hosted by this server.");
  sample(o, "agentd_agents", "", s.agents);
  metric(o, "agentd_calls_total", "counter", "Agent calls finished, by outcome.");
  sample(o, "agentd_calls_total", "outcome=\"ok\"", s.calls_ok);
  sample(o, "agentd_calls_total", "outcome=\"error\"", s.calls_error);
  metric(o, "agentd_class_calls_total", "counter", "Agent calls finished, by agent class and outcome.");
  for (const auto& [cls, counts] : s.calls_by_class) {
    // Class names are C++ identifiers (or "(none)"): nothing to escape.
    std::string ok = "class=\"" + cls + "\",outcome=\"ok\"";
    std::string error = "class=\"" + cls + "\",outcome=\"error\"";
    sample(o, "agentd_class_calls_total", ok.c_str(), counts.first);
    sample(o, "agentd_class_calls_total", error.c_str(), counts.second);
  }
  metric(o, "agentd_calls_queued", "gauge", "Calls waiting in agent mailboxes (running ones included).");
  sample(o, "agentd_calls_queued", "", s.calls_queued);
  metric(o, "agentd_calls_running", "gauge", "Calls (and agent constructors) running on workers.");
  sample(o, "agentd_calls_running", "", s.calls_running);
  metric(o, "agentd_result_pool_size", "gauge", "Call results kept for placeholders (pending included).");
  sample(o, "agentd_result_pool_size", "", s.result_pool_size);
  metric(o, "agentd_result_pool_evictions_total", "counter", "Results evicted by size or age.");
  sample(o, "agentd_result_pool_evictions_total", "", s.result_pool_evictions);
  metric(o, "agentd_peer_fetches_total", "counter", "Placeholder results fetched from other servers.");
  sample(o, "agentd_peer_fetches_total", "", s.peer_fetches);
  metric(o, "agentd_model_calls_total", "counter", "Model calls made by agents, failed ones included.");
  sample(o, "agentd_model_calls_total", "", s.model_calls);
  metric(o, "agentd_model_errors_total", "counter", "Model calls that failed.");
  sample(o, "agentd_model_errors_total", "", s.model_errors);
  metric(o, "agentd_model_tokens_total", "counter", "Model tokens, by kind.");
  sample(o, "agentd_model_tokens_total", "kind=\"prompt\"", s.prompt_tokens);
  sample(o, "agentd_model_tokens_total", "kind=\"completion\"", s.completion_tokens);
  metric(o, "agentd_bytes_total", "counter", "RPC bytes, by connection kind and direction.");
  sample(o, "agentd_bytes_total", "conn=\"client\",dir=\"in\"", s.bytes[0]);
  sample(o, "agentd_bytes_total", "conn=\"client\",dir=\"out\"", s.bytes[1]);
  sample(o, "agentd_bytes_total", "conn=\"peer\",dir=\"in\"", s.bytes[2]);
  sample(o, "agentd_bytes_total", "conn=\"peer\",dir=\"out\"", s.bytes[3]);
  metric(o, "agentd_workers", "gauge", "Worker threads running agent code.");
  sample(o, "agentd_workers", "", s.workers);
  metric(o, "agentd_call_duration_seconds", "histogram", "Run time of finished agent calls.");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
    cumulative += s.latency.buckets[i];
    sample(o, "agentd_call_duration_seconds_bucket",
           fmt::format("le=\"{}\"", LatencyHistogram::kBounds[i]).c_str(), cumulative);
  }
  sample(o, "agentd_call_duration_seconds_bucket", "le=\"+Inf\"", s.latency.count);
  sample(o, "agentd_call_duration_seconds_sum", "", s.latency.sum);
  sample(o, "agentd_call_duration_seconds_count", "", s.latency.count);
  return o;
}

namespace {

constexpr std::size_t kMaxHead = 8192;
constexpr auto kRequestTimeout = 10 * kj::SECONDS;

std::string http_response(const char* status, const char* content_type, const std::string& body) {
  return fmt::format("HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n"
                     "Connection: close\r\n\r\n{}",
                     status, content_type, body.size(), body);
}

}  // namespace

struct MetricsEndpoint::Connection {
  kj::Own<kj::AsyncIoStream> stream;
  std::string head;
  std::string response;
  char buf[1024];
};

MetricsEndpoint::MetricsEndpoint(kj::Own<kj::ConnectionReceiver> listener, kj::Timer& timer,
                                 std::function<std::string()> render)
    : listener_(kj::mv(listener)),
      port_(static_cast<std::uint16_t>(listener_->getPort())),
      timer_(timer), render_(std::move(render)), tasks_(*this) {
  tasks_.add(accept_loop());
}

MetricsEndpoint::~MetricsEndpoint() = default;

void MetricsEndpoint::taskFailed(kj::Exception&& e) {
  spdlog::warn("metrics endpoint: {}", e.getDescription().cStr());
}

std::string MetricsEndpoint::respond(const std::string& head) const {
  auto line_end = head.find("\r\n");
  std::string line = head.substr(0, line_end);
  // "GET /metrics HTTP/1.1" (a query string is ignored).
  auto sp1 = line.find(' ');
  auto sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  std::string method = line.substr(0, sp1);
  std::string target =
      sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 == std::string::npos ? sp2 : sp2 - sp1 - 1);
  std::string path = target.substr(0, target.find('?'));
  if (method == "GET" && path == "/metrics")
    return http_response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_());
  return http_response("404 Not Found", "text/plain; charset=utf-8",
                       "not found: metrics are at GET /metrics\n");
}

kj::Promise<void> MetricsEndpoint::accept_loop() {
  return listener_->accept().then([this](kj::Own<kj::AsyncIoStream> stream) {
    tasks_.add(serve(kj::mv(stream)));
    return accept_loop();
  });
}

kj::Promise<void> MetricsEndpoint::serve(kj::Own<kj::AsyncIoStream> stream) {
  auto conn = kj::heap<Connection>();
  conn->stream = kj::mv(stream);
  auto& c = *conn;
  // A client that never finishes its request is dropped; so is one that disconnects early.
  return timer_.timeoutAfter(kRequestTimeout, read_head(c).attach(kj::mv(conn)))
      .catch_([](kj::Exception&&) {});
}

kj::Promise<void> MetricsEndpoint::read_head(Connection& c) {
  return c.stream->tryRead(c.buf, 1, sizeof c.buf).then([this, &c](size_t n) -> kj::Promise<void> {
    if (n == 0) return kj::READY_NOW;  // closed before a whole request head
    c.head.append(c.buf, n);
    if (c.head.find("\r\n\r\n") == std::string::npos) {
      if (c.head.size() <= kMaxHead) return read_head(c);
      c.response = http_response("431 Request Header Fields Too Large", "text/plain; charset=utf-8",
                                 "request head too large\n");
    } else {
      c.response = respond(c.head);
    }
    return c.stream->write(c.response.data(), c.response.size());
  });
}

}  // namespace agentd::detail
