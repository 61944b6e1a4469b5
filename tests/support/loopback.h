// Plain loopback TCP below the client library: the address, a blocking connection, a socket that
// sends the bytes no client would, and a port held so that no other test's server is given it.
// Failures throw std::runtime_error naming the call and errno (a test reports it as its failure).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace agentd::test {

// ip:port; ip is dotted IPv4 (default 127.0.0.1, the loopback every test server listens on).
inline sockaddr_in loopback_address(std::uint16_t port, const std::string& ip = "127.0.0.1") {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1)
    throw std::runtime_error("loopback_address: not an IPv4 address: " + ip);
  return a;
}

namespace loopback_detail {
// Throws for the call that just failed: errno is read before anything else can change it.
[[noreturn]] inline void socket_failure(const char* what, std::uint16_t port, int fd) {
  const int e = errno;
  if (fd >= 0) ::close(fd);
  throw std::runtime_error(std::string(what) + " (port " + std::to_string(port) + "): " + std::strerror(e));
}
}  // namespace loopback_detail

// A blocking TCP connection to 127.0.0.1:port from the source address source (any of 127/8),
// without Nagle's delay, as kj's own connections. The caller owns the descriptor.
inline int connect_loopback(std::uint16_t port, const std::string& source = "127.0.0.1") {
  const sockaddr_in from = loopback_address(0, source), to = loopback_address(port);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) loopback_detail::socket_failure("socket", port, fd);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof from) != 0)
    loopback_detail::socket_failure("bind to the source address", port, fd);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0)
    loopback_detail::socket_failure("connect to 127.0.0.1", port, fd);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Bytes on a plain socket, as a hostile client or one in another language sends them.
class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port, const std::string& source = "127.0.0.1")
      : fd_(connect_loopback(port, source)) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &len) != 0)
      loopback_detail::socket_failure("getsockname", port, fd_);
    peer_name_ = source + ":" + std::to_string(ntohs(local.sin_port));
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  // "127.0.0.1:PORT": how the server names this connection in its log.
  const std::string& peer_name() const { return peer_name_; }

  // Sends all of data; false when the server closed first (a reset).
  bool send_all(const std::string& data) {
    std::size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  void end_writing() { ::shutdown(fd_, SHUT_WR); }

  // True once the server closed the connection (EOF or reset) within timeout; what the server
  // sent before (an RPC Abort) is read and discarded.
  bool wait_closed(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    do {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }

 private:
  int fd_;
  std::string peer_name_;
};

// Keeps 127.0.0.1:port bound but not listening while it lives. A connection there is refused,
// as with nothing there, and the kernel gives the port to no one binding port 0 (another test's
// server). A server started on the port meanwhile still binds and listens (kj sets SO_REUSEADDR
// on its listening sockets, as this does), so a restart can be made under the reservation.
// Binding fails while another socket listens on the port (a server not yet gone). Port 0
// reserves a free port, which port() names.
class PortReservation {
 public:
  explicit PortReservation(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (fd_ < 0) loopback_detail::socket_failure("socket", port, fd_);
    const int one = 1;  // the killed server's closed connections wait in TIME_WAIT on the port
    if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
      loopback_detail::socket_failure("SO_REUSEADDR", port, fd_);
    const sockaddr_in a = loopback_address(port);  // 127.0.0.1: cannot throw
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
      loopback_detail::socket_failure("reserving the port", port, fd_);
  }
  ~PortReservation() { ::close(fd_); }
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;

  std::uint16_t port() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      loopback_detail::socket_failure("getsockname", 0, -1);
    return ntohs(a.sin_port);
  }

 private:
  int fd_;
};

}  // namespace agentd::test
