// The baselines agentd is measured against in the same run:
//   - a bare Cap'n Proto echo (bench_echo.capnp): TwoPartyServer on its own KJ loop thread in a
//     child process (EchoServers), TwoPartyClient on the calling thread, loopback TCP: the RPC
//     stack with no agentd;
//   - a raw TCP ping-pong over loopback to the same child: the floor under any RPC.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace agentd::bench {

// The echo servers the baselines call, in a child process of their own (`agentd-bench
// --serve-echo`), as agentd's server is: a bare Cap'n Proto echo (TwoPartyServer on one KJ loop
// thread) and a raw TCP echo, both on 127.0.0.1. A server in the bench's own process would share
// its address space with the client: on one CPU its hand-offs are thread switches without the
// address-space switch that every round trip to as_server pays, and the baseline would be cheaper
// than any server could be. Stopped (stdin closed) when destroyed.
class EchoServers {
 public:
  EchoServers();
  ~EchoServers();
  EchoServers(const EchoServers&) = delete;
  EchoServers& operator=(const EchoServers&) = delete;

  std::uint16_t capnp_port() const { return capnp_port_; }
  std::uint16_t tcp_port() const { return tcp_port_; }
  // CPU time the echo process has used so far (seconds, all its threads: like as_server's
  // info().cpu_seconds). Only the Cap'n Proto echo's loop thread works while it is called.
  double cpu_seconds() const;
  // The echo process's pid (for context_switches()).
  std::int64_t pid() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::uint16_t capnp_port_ = 0;
  std::uint16_t tcp_port_ = 0;
};

// Runs both echo servers in this process until stdin closes or SIGTERM/SIGINT; prints
// "PORT <capnp> <tcp>" when listening. Returns the exit status (agentd-bench --serve-echo).
int serve_echo();

// Sequential echo calls of payload bytes from the calling thread (which must not run a KJ event
// loop already); microseconds per call, after a short warm-up.
std::vector<double> capnp_echo_latency(std::uint16_t port, std::size_t calls, std::size_t payload);

// n echo calls sent at once (pipelined on one connection), then all answers awaited; calls/s.
double capnp_echo_throughput(std::uint16_t port, std::size_t n, std::size_t payload);

// Sequential ping-pongs of payload bytes over a plain loopback TCP socket (TCP_NODELAY) to the
// raw echo on port (EchoServers::tcp_port); microseconds per round trip, after a short warm-up.
// spin > 0: each answer is polled for (non-blocking recv) up to spin before the thread sleeps in
// read(), as a lane client does (ClientOptions::lane_spin); the echo side sleeps in read() always.
std::vector<double> tcp_pingpong_latency(std::uint16_t port, std::size_t calls, std::size_t payload,
                                         std::chrono::microseconds spin = std::chrono::microseconds(0));

// Where the raw ping-pong's two ends run. unpinned: where the scheduler puts them (when both
// sleep in read(), Linux may run them on one CPU: a wake-up without an inter-processor interrupt,
// which on a virtual machine can be several times cheaper than one across CPUs). two_cpus: the
// calling thread on one allowed CPU, every thread of the echo process on another (agentd's lanes
// poll on both ends, which keeps them apart). one_cpu: both on the calling thread's first
// allowed CPU.
enum class Placement { unpinned, two_cpus, one_cpu };

// tcp_pingpong_latency (the reader sleeps) with its ends placed as said, the echo process being
// echo_pid; both ends get their CPUs back afterwards. Empty when the process may run on fewer
// CPUs than the placement needs, or the CPUs cannot be set.
std::vector<double> tcp_pingpong_placed(std::uint16_t port, std::int64_t echo_pid, Placement placement,
                                        std::size_t calls, std::size_t payload);
// Round trips of payload bytes over a Unix socket pair to an echo thread of this process (first
// 50 excluded).
std::vector<double> unix_pingpong_latency(std::size_t calls, std::size_t payload);

}  // namespace agentd::bench
