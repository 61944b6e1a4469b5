#include "lane_poll.h"

#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace agentd::net {

namespace {

int spare_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set) - 1;
}

std::atomic<int> g_pollers{0};

}  // namespace

PollSlot::PollSlot() {
  static const int most = spare_cpus();
  int now = g_pollers.load(std::memory_order_relaxed);
  while (now < most) {
    if (g_pollers.compare_exchange_weak(now, now + 1, std::memory_order_relaxed)) {
      taken_ = true;
      return;
    }
  }
}

PollSlot::~PollSlot() {
  if (taken_) g_pollers.fetch_sub(1, std::memory_order_relaxed);
}

ssize_t recv_until(int fd, void* buf, std::size_t n, std::chrono::steady_clock::time_point until) {
  for (;;) {
    const ssize_t got = ::recv(fd, buf, n, MSG_DONTWAIT);
    if (got >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return got;
    if (std::chrono::steady_clock::now() >= until) {
      errno = EAGAIN;
      return -1;
    }
  }
}

ssize_t read_polling(int fd, void* buf, std::size_t n, std::optional<PollSlot>& slot,
                     std::chrono::steady_clock::time_point until) {
  if (slot && slot->taken()) {
    const ssize_t got = recv_until(fd, buf, n, until);
    if (got >= 0 || errno != EAGAIN) return got;
    slot.reset();  // nothing within the spin: sleep for it
  }
  return ::read(fd, buf, n);
}

}  // namespace agentd::net
