#include "metrics.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <iterator>
#include <string_view>

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

// A label value as the text format wants it: backslash, quote and newline escaped.
std::string label_escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string render_metrics(const ServerStats& s) {
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
  sample(o, "agentd_bytes_total", "conn=\"client\",dir=\"in\"", s.bytes.client.in);
  sample(o, "agentd_bytes_total", "conn=\"client\",dir=\"out\"", s.bytes.client.out);
  sample(o, "agentd_bytes_total", "conn=\"peer\",dir=\"in\"", s.bytes.peer.in);
  sample(o, "agentd_bytes_total", "conn=\"peer\",dir=\"out\"", s.bytes.peer.out);
  metric(o, "agentd_workers", "gauge", "Worker threads running agent code.");
  sample(o, "agentd_workers", "", s.workers);
  metric(o, "agentd_workers_busy", "gauge",
         "Worker threads in an agent call (running or blocked); at agentd_workers_max, calls wait.");
  sample(o, "agentd_workers_busy", "", s.workers_busy);
  metric(o, "agentd_workers_max", "gauge", "The most worker threads (--max-workers).");
  sample(o, "agentd_workers_max", "", s.workers_max);
  metric(o, "agentd_lanes_open", "gauge", "Synchronous lanes being served (at most --lane-threads).");
  sample(o, "agentd_lanes_open", "", s.lanes_open);
  metric(o, "agentd_lane_calls_total", "counter", "Calls answered on synchronous lanes.");
  sample(o, "agentd_lane_calls_total", "", s.lane_calls);
  metric(o, "agentd_lanes_refused_total", "counter",
         "Lanes refused because every lane thread was taken (their clients used RPC).");
  sample(o, "agentd_lanes_refused_total", "", s.lanes_refused);
  metric(o, "agentd_calls_slow", "gauge", "Calls in progress longer than --slow-call-warn now.");
  sample(o, "agentd_calls_slow", "", s.calls_slow);
  metric(o, "agentd_calls_slow_total", "counter", "Calls ever reported (logged) as slow.");
  sample(o, "agentd_calls_slow_total", "", s.calls_slow_total);
  if (s.python_loop_stalls >= 0) {
    metric(o, "agentd_python_loop_stalls_total", "counter",
           "Times the asyncio loop of Python agents (--agent-dir) went 2 s without running.");
    sample(o, "agentd_python_loop_stalls_total", "", static_cast<std::uint64_t>(s.python_loop_stalls));
  }
  metric(o, "agentd_calls_timed_out_total", "counter",
         "Calls failed with timeout at their deadline (--call-timeout, --class-call-timeout).");
  sample(o, "agentd_calls_timed_out_total", "", s.calls_timed_out);
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
  if (!s.tools.empty()) {
    // A row per tool server (tool="": all its tools) and per tool called so far.
    auto labels = [](const ToolMetrics& t) {
      return "server=\"" + label_escape(t.server) + "\",tool=\"" + label_escape(t.tool) + "\"";
    };
    metric(o, "agentd_tool_calls_total", "counter", "MCP tool calls finished, failed ones included.");
    for (const auto& t : s.tools) sample(o, "agentd_tool_calls_total", labels(t).c_str(), t.usage.calls);
    metric(o, "agentd_tool_failures_total", "counter",
           "MCP tool calls that failed (errors and results with isError).");
    for (const auto& t : s.tools)
      sample(o, "agentd_tool_failures_total", labels(t).c_str(), t.usage.failures);
    metric(o, "agentd_tool_call_duration_seconds", "histogram",
           "Time from sending a tool call to its answer.");
    for (const auto& t : s.tools) {
      const std::string l = labels(t);
      for (std::size_t i = 0; i < kToolLatencyBounds.size(); ++i)
        sample(o, "agentd_tool_call_duration_seconds_bucket",
               fmt::format("{},le=\"{}\"", l, kToolLatencyBounds[i]).c_str(), t.buckets[i]);
      sample(o, "agentd_tool_call_duration_seconds_bucket", (l + ",le=\"+Inf\"").c_str(), t.usage.calls);
      sample(o, "agentd_tool_call_duration_seconds_sum", l.c_str(), t.usage.latency_us_total / 1e6);
      sample(o, "agentd_tool_call_duration_seconds_count", l.c_str(), t.usage.calls);
    }
  }
  return o;
}

namespace {

// Sends a whole response with a body of known length.
kj::Promise<void> send(kj::HttpService::Response& response, const kj::HttpHeaderTable& table, unsigned status,
                       kj::StringPtr status_text, kj::StringPtr content_type, kj::String body) {
  kj::HttpHeaders headers(table);
  headers.set(kj::HttpHeaderId::CONTENT_TYPE, content_type);
  auto stream = response.send(status, status_text, headers, body.size());
  auto written = stream->write(body.begin(), body.size());
  return written.attach(kj::mv(stream), kj::mv(body));
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(kj::Own<kj::ConnectionReceiver> listener, kj::Timer& timer,
                                 std::function<std::string()> render)
    : listener_(kj::mv(listener)),
      port_(static_cast<std::uint16_t>(listener_->getPort())),
      timer_(timer),
      render_(std::move(render)),
      http_(timer, header_table_, *this,
            kj::HttpServerSettings{
                .headerTimeout = kRequestTimeout,
                // kj-http 0.9.2 sends "Connection: close" when shouldClose() says so, then still
                // waits pipelineTimeout for another request: zero closes right after the response.
                .pipelineTimeout = 0 * kj::SECONDS,
                .errorHandler = static_cast<kj::HttpServerErrorHandler&>(*this),
                .callbacks = static_cast<kj::HttpServerCallbacks&>(*this)}),
      tasks_(task_errors_) {
  tasks_.add(accept_loop());
}

MetricsEndpoint::~MetricsEndpoint() = default;

kj::Promise<void> MetricsEndpoint::accept_loop() {
  // Our own loop rather than HttpServer::listenHttp(ConnectionReceiver&): it bounds a connection's
  // whole life (a client that never reads its response included), and a connection's failure is
  // logged at debug where kj-http would KJ_LOG it to plain stderr.
  return listener_->accept().then([this](kj::Own<kj::AsyncIoStream> stream) {
    tasks_.add(
        timer_.timeoutAfter(kRequestTimeout, http_.listenHttp(kj::mv(stream))).catch_([](kj::Exception&& e) {
          spdlog::debug("metrics endpoint: connection dropped: {}", e.getDescription().cStr());
        }));
    return accept_loop();
  });
}

kj::Promise<void> MetricsEndpoint::request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders&,
                                           kj::AsyncInputStream&, Response& response) {
  // The request body is never read; kj-http drains a little of it or drops the connection.
  std::string_view path(url.begin(), url.size());
  path = path.substr(0, path.find('?'));  // "/metrics?x=1" is /metrics too
  if (method == kj::HttpMethod::GET && path == "/metrics") {
    std::string text = render_();
    return send(response, header_table_, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
                kj::heapString(text.data(), text.size()));
  }
  return send(response, header_table_, 404, "Not Found", "text/plain; charset=utf-8",
              kj::heapString("not found: metrics are at GET /metrics\n"));
}

kj::Promise<void> MetricsEndpoint::handleApplicationError(kj::Exception e, kj::Maybe<Response&> response) {
  // kj-http's default (500 with the exception's text; nothing for a disconnect), minus its KJ_LOG
  // to plain stderr when no response can be sent any more: a reset mid-request, or a request
  // head over kj-http's 128 KiB limit. Those concern one client only; the connection closes.
  spdlog::debug("metrics endpoint: {}", e.getDescription().cStr());
  if (response == nullptr) return kj::READY_NOW;
  return kj::HttpServerErrorHandler::handleApplicationError(kj::mv(e), response);
}

}  // namespace agentd::detail
