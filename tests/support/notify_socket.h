// NotifySocket: the test playing systemd's role in the notify protocol (sd_notify(3)): a bound
// AF_UNIX datagram socket that reads what a notifier sends to it.
#pragma once

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace agentd::test {

// A bound AF_UNIX datagram socket: a path, or an abstract name given with a leading '@'.
class NotifySocket {
 public:
  explicit NotifySocket(std::string name) : name_(std::move(name)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name_.data(), name_.size());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    if (name_[0] == '@')
      addr.sun_path[0] = '\0';
    else
      ++len;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  }
  ~NotifySocket() {
    ::close(fd_);
    if (name_[0] == '/') ::unlink(name_.c_str());
  }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;
  const std::string& name() const { return name_; }

  // The next datagram, or nothing when none arrives within timeout.
  std::optional<std::string> receive(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char buf[4096];
    auto n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<std::size_t>(n));
  }

  // Reads datagrams until one contains what (returned), collecting the others into seen.
  std::optional<std::string> receive_until(const std::string& what, std::vector<std::string>& seen,
                                           std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      auto m = receive(left);
      if (!m) return std::nullopt;
      if (m->find(what) != std::string::npos) return m;
      seen.push_back(*m);
    }
  }

 private:
  std::string name_;
  int fd_ = -1;
};

// Makes abstract socket names unique across test processes running at once.
inline std::string unique_suffix() {
  std::random_device rd;
  return std::to_string(::getpid()) + "-" + std::to_string(rd());
}

}  // namespace agentd::test
