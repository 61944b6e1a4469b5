#include "sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace agentd::detail {

SdNotifier::SdNotifier(std::string socket, std::chrono::microseconds watchdog)
    : socket_(std::move(socket)), watchdog_(watchdog) {
  // Only absolute paths and abstract names are valid notification sockets (as in sd_notify).
  if (socket_.empty() || (socket_[0] != '/' && socket_[0] != '@') ||
      socket_.size() >= sizeof(sockaddr_un::sun_path)) {
    socket_.clear();
    return;
  }
  fd_ = kj::AutoCloseFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd_.get() < 0) socket_.clear();
}

SdNotifier::~SdNotifier() = default;

// A moved-from notifier is disabled (no socket name, no fd).
SdNotifier::SdNotifier(SdNotifier&& other) noexcept
    : socket_(std::exchange(other.socket_, {})), watchdog_(other.watchdog_), fd_(kj::mv(other.fd_)) {}

SdNotifier& SdNotifier::operator=(SdNotifier&& other) noexcept {
  socket_ = std::exchange(other.socket_, {});
  watchdog_ = other.watchdog_;
  fd_ = kj::mv(other.fd_);
  return *this;
}

SdNotifier SdNotifier::from_environment() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  std::chrono::microseconds watchdog{0};
  if (const char* usec = std::getenv("WATCHDOG_USEC"); usec && *usec) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(usec, &end, 10);
    bool for_us = true;
    if (const char* pid = std::getenv("WATCHDOG_PID"); pid && *pid)
      for_us = std::strtoll(pid, nullptr, 10) == static_cast<long long>(::getpid());
    if (end && *end == '\0' && v > 0 && for_us) watchdog = std::chrono::microseconds(v);
  }
  return SdNotifier(socket ? socket : "", watchdog);
}

bool SdNotifier::notify(std::string_view state) const {
  if (fd_.get() < 0 || state.empty()) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_.data(), socket_.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size());
  if (socket_[0] == '@')
    addr.sun_path[0] = '\0';  // abstract namespace: no trailing NUL
  else
    ++len;  // a path: count its NUL
  ssize_t n;
  do {
    n = ::sendto(fd_.get(), state.data(), state.size(), MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&addr), len);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(state.size());
}

}  // namespace agentd::detail
