// The gateway's own Prometheus metrics, served at GET /metrics: requests by route and status,
// their latency (a histogram), connections and streams open now. Process-wide; any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace gateway::http {

class Metrics {
 public:
  // A request answered: path is reduced to the routes served (others count as "other").
  void request(std::string_view path, unsigned status, double seconds);
  void connection_opened() { connections_.fetch_add(1); }
  void connection_closed() { connections_.fetch_sub(1); }
  void stream_opened() { streams_.fetch_add(1); }
  void stream_closed() { streams_.fetch_sub(1); }
  // A TLS client whose handshake failed (or stalled past the request deadline).
  void tls_handshake_failed() { tls_handshake_failures_.fetch_add(1); }
  // The Prometheus text exposition.
  std::string text() const;

 private:
  static constexpr double kBuckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                        0.1,    0.25,  0.5,    1,     2.5,  5,     10};
  struct Latency {
    std::uint64_t counts[std::size(kBuckets)] = {};
    std::uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, unsigned>, std::uint64_t> requests_;  // (route, status)
  std::map<std::string, Latency> latency_;                              // by route
  std::atomic<std::int64_t> connections_{0};
  std::atomic<std::int64_t> streams_{0};
  std::atomic<std::uint64_t> tls_handshake_failures_{0};
};

Metrics& metrics();

}  // namespace gateway::http
