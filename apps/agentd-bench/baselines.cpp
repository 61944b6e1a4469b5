#include "baselines.h"

#include "bench_echo.capnp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <chrono>
#include <ctime>
#include <future>
#include <stdexcept>
#include <string>

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

}  // namespace

CapnpEchoServer::CapnpEchoServer() {
  std::promise<void> ready;
  auto started = ready.get_future();
  thread_ = std::thread([this, ready = std::move(ready)]() mutable {
    try {
      auto io = kj::setupAsyncIo();
      capnp::TwoPartyServer server(kj::heap<EchoImpl>());
      auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope);
      auto listener = addr->listen();
      auto paf = kj::newPromiseAndFulfiller<void>();
      port_ = static_cast<std::uint16_t>(listener->getPort());
      executor_ = &kj::getCurrentThreadExecutor();
      stop_ = paf.fulfiller.get();
      auto serving = server.listen(*listener);
      ready.set_value();
      paf.promise.exclusiveJoin(kj::mv(serving)).wait(io.waitScope);
    } catch (...) {
      try {
        ready.set_exception(std::current_exception());
      } catch (const std::future_error&) {
        // already running: the loop failed later; the server simply stops answering
      }
    }
  });
  try {
    started.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

CapnpEchoServer::~CapnpEchoServer() {
  executor_->executeSync([this]() { stop_->fulfill(); });
  thread_.join();
}

double CapnpEchoServer::cpu_seconds() const {
  clockid_t clock;
  timespec ts{};
  if (pthread_getcpuclockid(const_cast<std::thread&>(thread_).native_handle(), &clock) != 0 ||
      clock_gettime(clock, &ts) != 0)
    return 0;
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

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

namespace {

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

bool write_full(int fd, const char* buf, std::size_t n) {
  std::size_t put = 0;
  while (put < n) {
    ssize_t r = ::write(fd, buf + put, n - put);
    if (r <= 0) return false;
    put += static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace

std::vector<double> tcp_pingpong_latency(std::size_t calls, std::size_t payload) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  check(lfd >= 0, "socket");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  check(::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0, "bind");
  check(::listen(lfd, 1) == 0, "listen");
  socklen_t len = sizeof sa;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len);

  // The echo side: one connection, echoes until the client closes.
  std::thread server([lfd, payload]() {
    int fd = ::accept(lfd, nullptr, nullptr);
    if (fd < 0) return;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string buf(payload, '\0');
    while (read_full(fd, buf.data(), payload) && write_full(fd, buf.data(), payload)) {
    }
    ::close(fd);
  });

  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  if (!connected) ::shutdown(lfd, SHUT_RDWR);  // wakes the accept() above
  std::vector<double> out;
  std::string msg(payload, 'x'), back(payload, '\0');
  bool ok = connected;
  for (std::size_t i = 0; ok && i < calls + kWarmup; ++i) {
    auto t0 = Clock::now();
    ok = write_full(fd, msg.data(), payload) && read_full(fd, back.data(), payload);
    if (ok && i >= kWarmup) out.push_back(micros_since(t0));
  }
  ::close(fd);
  server.join();
  ::close(lfd);
  check(ok, "connection failed");
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
