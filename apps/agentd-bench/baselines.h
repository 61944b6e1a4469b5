// The baselines agentd is measured against in the same run:
//   - a bare Cap'n Proto echo (bench_echo.capnp): TwoPartyServer on its own KJ loop thread in this
//     process, TwoPartyClient on the calling thread, loopback TCP: the RPC stack with no agentd;
//   - a raw TCP ping-pong over loopback: the floor under any RPC.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace kj {
class Executor;
template <typename T>
class PromiseFulfiller;
}  // namespace kj

namespace agentd::bench {

// A bare Cap'n Proto echo server on 127.0.0.1 (a free port), served by its own thread until
// destroyed.
class CapnpEchoServer {
 public:
  CapnpEchoServer();
  ~CapnpEchoServer();
  CapnpEchoServer(const CapnpEchoServer&) = delete;
  CapnpEchoServer& operator=(const CapnpEchoServer&) = delete;

  std::uint16_t port() const { return port_; }
  // CPU time the server thread has used so far (seconds).
  double cpu_seconds() const;

 private:
  void thread_main();

  std::thread thread_;
  std::uint16_t port_ = 0;
  const kj::Executor* executor_ = nullptr;      // the server loop's; set before port_ is known
  kj::PromiseFulfiller<void>* stop_ = nullptr;  // owned by the server thread
};

// Sequential echo calls of payload bytes from the calling thread (which must not run a KJ event
// loop already); microseconds per call, after a short warm-up.
std::vector<double> capnp_echo_latency(std::uint16_t port, std::size_t calls, std::size_t payload);

// n echo calls sent at once (pipelined on one connection), then all answers awaited; calls/s.
double capnp_echo_throughput(std::uint16_t port, std::size_t n, std::size_t payload);

// Sequential ping-pongs of payload bytes over a plain loopback TCP socket (TCP_NODELAY) to a
// blocking echo thread; microseconds per round trip, after a short warm-up.
// Round trips of payload bytes over a Unix socket pair to an echo thread (first 50 excluded).
std::vector<double> unix_pingpong_latency(std::size_t calls, std::size_t payload);
std::vector<double> tcp_pingpong_latency(std::size_t calls, std::size_t payload);

}  // namespace agentd::bench
