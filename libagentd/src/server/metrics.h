// Metrics: the Prometheus text exposition (format 0.0.4) of a server's counters, and a tiny
// HTTP/1.1 responder serving it at /metrics.
#pragma once

#include "call_stats.h"

#include <kj/async-io.h>
#include <kj/timer.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace agentd::detail {

// What /metrics reports, read from the server's parts on the loop thread.
struct MetricsSnapshot {
  std::uint64_t agents = 0;
  std::uint64_t calls_ok = 0;
  std::uint64_t calls_error = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> calls_by_class;  // {ok, error}
  std::uint64_t calls_queued = 0;
  std::uint64_t calls_running = 0;
  std::uint64_t result_pool_size = 0;
  std::uint64_t result_pool_evictions = 0;
  std::uint64_t peer_fetches = 0;
  std::uint64_t model_calls = 0;
  std::uint64_t model_errors = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::array<std::uint64_t, 4> bytes{};  // client in, client out, peer in, peer out
  std::uint64_t workers = 0;
  LatencyHistogram latency;
};

// The Prometheus text exposition format 0.0.4 of s.
std::string render_metrics(const MetricsSnapshot& s);

// Answers "GET /metrics" with render()'s text and anything else with 404, one request per
// connection. Loop thread only. The listener is owned; timer is borrowed and outlives this.
// Destroying it stops accepting and drops open connections.
class MetricsEndpoint final : private kj::TaskSet::ErrorHandler {
 public:
  MetricsEndpoint(kj::Own<kj::ConnectionReceiver> listener, kj::Timer& timer,
                  std::function<std::string()> render);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  std::uint16_t port() const { return port_; }

  // The response to one request head (everything up to and including "\r\n\r\n").
  std::string respond(const std::string& head) const;

 private:
  struct Connection;
  kj::Promise<void> accept_loop();
  kj::Promise<void> serve(kj::Own<kj::AsyncIoStream> stream);
  kj::Promise<void> read_head(Connection& c);
  void taskFailed(kj::Exception&& e) override;

  kj::Own<kj::ConnectionReceiver> listener_;
  std::uint16_t port_;
  kj::Timer& timer_;
  std::function<std::string()> render_;
  kj::TaskSet tasks_;
};

}  // namespace agentd::detail
