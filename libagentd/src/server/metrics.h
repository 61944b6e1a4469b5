// Metrics: the Prometheus text exposition (format 0.0.4) of a server's stats (server_stats.h),
// and the HTTP endpoint (kj-http) serving it at /metrics.
#pragma once

#include "server_stats.h"
#include "task_errors.h"

#include <kj/async-io.h>
#include <kj/compat/http.h>
#include <kj/timer.h>

#include <cstdint>
#include <functional>
#include <string>

namespace agentd::detail {

// What /metrics reports is the server's stats snapshot.
// TODO(cleanup): tests/fuzz/metrics_http_fuzz.cpp still names it MetricsSnapshot.
using MetricsSnapshot = ServerStats;

// The Prometheus text exposition format 0.0.4 of s.
std::string render_metrics(const ServerStats& s);

// Serves render()'s text at "GET /metrics" over HTTP/1.1 (kj-http); other paths and methods get
// 404. kj-http itself answers what it cannot parse (400, or 501 for an unknown method) and closes
// on a request head over 128 KiB. One request per connection: every response says "Connection:
// close" and the connection closes after it. A connection is dropped kRequestTimeout after it
// opens, whatever it is doing. Loop thread only. The listener is owned; timer is borrowed and
// outlives this. Destroying it stops accepting and drops open connections.
class MetricsEndpoint final : private kj::HttpService,
                              private kj::HttpServerErrorHandler,
                              private kj::HttpServerCallbacks {
 public:
  static constexpr kj::Duration kRequestTimeout = 10 * kj::SECONDS;

  MetricsEndpoint(kj::Own<kj::ConnectionReceiver> listener, kj::Timer& timer,
                  std::function<std::string()> render);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  kj::Promise<void> accept_loop();
  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                            kj::AsyncInputStream& body, Response& response) override;
  kj::Promise<void> handleApplicationError(kj::Exception e, kj::Maybe<Response&> response) override;
  bool shouldClose() override { return true; }

  kj::Own<kj::ConnectionReceiver> listener_;
  std::uint16_t port_;
  kj::Timer& timer_;
  std::function<std::string()> render_;
  kj::HttpHeaderTable header_table_;
  // Borrows timer_, header_table_ and this (as service, error handler and callbacks).
  kj::HttpServer http_;
  TaskErrors task_errors_{"metrics endpoint"};
  kj::TaskSet tasks_;  // the accept loop and one task per connection; destroyed first
};

}  // namespace agentd::detail
