#include "baselines.h"

#include "bench_echo.capnp.h"
#include "helper_process.h"
#include "lane_poll.h"
#include "proc_stats.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>

namespace agentd::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kWarmup = 50;

double micros_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

class EchoImpl final : public wire::BenchEcho::Server {
 public:
  kj::Promise<void> echo(EchoContext context) override {
    context.getResults().setPayload(context.getParams().getPayload());
    return kj::READY_NOW;
  }
};

kj::Array<kj::byte> make_payload(std::size_t n) {
  auto data = kj::heapArray<kj::byte>(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<kj::byte>('a' + i % 26);
  return data;
}

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("raw tcp baseline: ") + what);
}

bool read_full(int fd, char* buf, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf + got, n - got);
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

// read_full that polls for up to spin before it sleeps in read(), as a lane does (net/lane_poll.h;
// one poller, whatever the process's CPUs).
bool read_full_polling(int fd, char* buf, std::size_t n, std::chrono::microseconds spin) {
  std::size_t got = 0;
  if (spin.count() > 0) {
    const ssize_t r = net::recv_until(fd, buf, n, Clock::now() + spin);
    if (r == 0 || (r < 0 && errno != EAGAIN)) return false;
    if (r > 0) got = static_cast<std::size_t>(r);
  }
  return read_full(fd, buf + got, n - got);
}

bool write_full(int fd, const char* buf, std::size_t n) {
  std::size_t put = 0;
  while (put < n) {
    ssize_t r = ::write(fd, buf + put, n - put);
    if (r <= 0) return false;
    put += static_cast<std::size_t>(r);
  }
  return true;
}

// The raw TCP echo: one connection at a time (the bench opens one per measurement), each echoed
// until its client closes; stops when the listener is shut down.
void tcp_echo_loop(int lfd) {
  for (;;) {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0 || !write_full(fd, buf, static_cast<std::size_t>(n))) break;
    }
    ::close(fd);
  }
}

}  // namespace

int serve_echo() {
  capture_stop_signals();
  auto io = kj::setupAsyncIo();
  capnp::TwoPartyServer server(kj::heap<EchoImpl>());
  auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope);
  auto listener = addr->listen();

  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd, 4) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    std::fprintf(stderr, "agentd-bench: --serve-echo: cannot listen for the raw TCP echo: %s\n",
                 std::strerror(errno));
    return 1;
  }
  std::thread tcp([lfd]() { tcp_echo_loop(lfd); });
  std::printf("PORT %u %u\n", static_cast<unsigned>(listener->getPort()),
              static_cast<unsigned>(ntohs(sa.sin_port)));
  std::fflush(stdout);
  server.listen(*listener).exclusiveJoin(told_to_stop(io)).wait(io.waitScope);
  ::shutdown(lfd, SHUT_RDWR);  // wakes the accept()
  tcp.join();
  ::close(lfd);
  return 0;
}

struct EchoServers::Impl {
  HelperProcess helper;
};

EchoServers::EchoServers() : impl_(std::make_unique<Impl>()) {
  const std::string what = "the echo servers (agentd-bench --serve-echo)";
  impl_->helper = start_helper({"--serve-echo"}, what);
  const std::string& line = impl_->helper.port_line;
  unsigned capnp = 0, tcp = 0;
  if (std::sscanf(line.c_str(), "PORT %u %u", &capnp, &tcp) != 2 || capnp == 0 || capnp > 65535 || tcp == 0 ||
      tcp > 65535)
    throw std::runtime_error(what + " gave no ports (they said \"" + line + "\")");
  capnp_port_ = static_cast<std::uint16_t>(capnp);
  tcp_port_ = static_cast<std::uint16_t>(tcp);
}

EchoServers::~EchoServers() { stop_helper(impl_->helper); }

double EchoServers::cpu_seconds() const {
  clockid_t clock;
  timespec ts{};
  if (clock_getcpuclockid(impl_->helper.process.pid(), &clock) != 0 || clock_gettime(clock, &ts) != 0)
    return 0;
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

std::int64_t EchoServers::pid() const { return impl_->helper.process.pid(); }

std::vector<double> capnp_echo_latency(std::uint16_t port, std::size_t calls, std::size_t payload) {
  auto io = kj::setupAsyncIo();
  auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", port).wait(io.waitScope);
  auto stream = addr->connect().wait(io.waitScope);
  capnp::TwoPartyClient client(*stream);
  auto echo = client.bootstrap().castAs<wire::BenchEcho>();
  auto data = make_payload(payload);
  std::vector<double> out;
  out.reserve(calls);
  for (std::size_t i = 0; i < calls + kWarmup; ++i) {
    auto t0 = Clock::now();
    auto req = echo.echoRequest();
    req.setPayload(data);
    auto resp = req.send().wait(io.waitScope);
    if (resp.getPayload().size() != payload) throw std::runtime_error("capnp echo: wrong answer");
    if (i >= kWarmup) out.push_back(micros_since(t0));
  }
  return out;
}

double capnp_echo_throughput(std::uint16_t port, std::size_t n, std::size_t payload) {
  auto io = kj::setupAsyncIo();
  auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", port).wait(io.waitScope);
  auto stream = addr->connect().wait(io.waitScope);
  capnp::TwoPartyClient client(*stream);
  auto echo = client.bootstrap().castAs<wire::BenchEcho>();
  auto data = make_payload(payload);
  for (std::size_t i = 0; i < kWarmup; ++i) {
    auto req = echo.echoRequest();
    req.setPayload(data);
    req.send().wait(io.waitScope);
  }
  auto t0 = Clock::now();
  auto promises = kj::heapArrayBuilder<kj::Promise<void>>(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto req = echo.echoRequest();
    req.setPayload(data);
    promises.add(req.send().then([payload](capnp::Response<wire::BenchEcho::EchoResults> r) {
      if (r.getPayload().size() != payload) throw std::runtime_error("capnp echo: wrong answer");
    }));
  }
  kj::joinPromises(promises.finish()).wait(io.waitScope);
  return n / (micros_since(t0) / 1e6);
}

std::vector<double> tcp_pingpong_latency(std::uint16_t port, std::size_t calls, std::size_t payload,
                                         std::chrono::microseconds spin) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(port);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  check(fd >= 0, "socket");
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  std::vector<double> out;
  std::string msg(payload, 'x'), back(payload, '\0');
  for (std::size_t i = 0; ok && i < calls + kWarmup; ++i) {
    auto t0 = Clock::now();
    ok = write_full(fd, msg.data(), payload) && read_full_polling(fd, back.data(), payload, spin);
    if (ok && i >= kWarmup) out.push_back(micros_since(t0));
  }
  ::close(fd);
  check(ok, "connection failed");
  return out;
}

std::vector<double> tcp_pingpong_placed(std::uint16_t port, std::int64_t echo_pid, Placement placement,
                                        std::size_t calls, std::size_t payload) {
  if (placement == Placement::unpinned) return tcp_pingpong_latency(port, calls, payload);
  cpu_set_t mine, theirs;
  if (::pthread_getaffinity_np(::pthread_self(), sizeof mine, &mine) != 0 ||
      ::sched_getaffinity(static_cast<pid_t>(echo_pid), sizeof theirs, &theirs) != 0)
    return {};
  std::vector<int> allowed;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mine)) allowed.push_back(cpu);
  const std::size_t needed = placement == Placement::two_cpus ? 2 : 1;
  if (allowed.size() < needed) return {};
  cpu_set_t here, there;
  CPU_ZERO(&here);
  CPU_ZERO(&there);
  CPU_SET(allowed[0], &here);
  CPU_SET(allowed[needed - 1], &there);
  std::vector<double> out;
  if (::pthread_setaffinity_np(::pthread_self(), sizeof here, &here) == 0 &&
      set_cpus(static_cast<pid_t>(echo_pid), there))
    out = tcp_pingpong_latency(port, calls, payload);
  set_cpus(static_cast<pid_t>(echo_pid), theirs);
  ::pthread_setaffinity_np(::pthread_self(), sizeof mine, &mine);
  return out;
}

std::vector<double> unix_pingpong_latency(std::size_t calls, std::size_t payload) {
  int fds[2];
  check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
  // The echo side: echoes until the other end closes.
  std::thread server([fd = fds[1], payload]() {
    std::string buf(payload, '\0');
    while (read_full(fd, buf.data(), payload) && write_full(fd, buf.data(), payload)) {
    }
    ::close(fd);
  });
  std::vector<double> out;
  std::string msg(payload, 'x'), back(payload, '\0');
  bool ok = true;
  for (std::size_t i = 0; ok && i < calls + kWarmup; ++i) {
    auto t0 = Clock::now();
    ok = write_full(fds[0], msg.data(), payload) && read_full(fds[0], back.data(), payload);
    if (ok && i >= kWarmup) out.push_back(micros_since(t0));
  }
  ::close(fds[0]);
  server.join();
  check(ok, "Unix socket pair failed");
  return out;
}

}  // namespace agentd::bench
