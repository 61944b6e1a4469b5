#include "bridge.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace agentd::detail {

namespace {
kj::AutoCloseFd make_eventfd() {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  return kj::AutoCloseFd(fd);
}
}  // namespace

Bridge::Bridge(kj::UnixEventPort& port)
    : fd_(make_eventfd()), observer_(port, fd_.get(), kj::UnixEventPort::FdObserver::OBSERVE_READ) {}

Bridge::~Bridge() = default;

void Bridge::post(kj::Function<void()> fn) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    // After close() the function is kept, never run, and destroyed with the bridge on its own
    // thread: it may hold objects (fulfillers, call contexts) that must not die elsewhere.
    queue_.push_back(kj::mv(fn));
    if (closed_) return;
    if (!signaled_) {
      signaled_ = true;
      wake = true;
    }
  }
  if (wake) {
    std::uint64_t one = 1;
    ssize_t n;
    do {
      n = ::write(fd_.get(), &one, sizeof one);
    } while (n < 0 && errno == EINTR);
  }
}

void Bridge::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
}

kj::Promise<void> Bridge::run() { return drain_loop(); }

kj::Promise<void> Bridge::drain_loop() {
  return observer_.whenBecomesReadable().then([this]() {
    // One read takes the whole count (and resets it): the next post signals afresh.
    std::uint64_t count;
    ssize_t n;
    do {
      n = ::read(fd_.get(), &count, sizeof count);
    } while (n < 0 && errno == EINTR);
    run_queued();
    return drain_loop();
  });
}

void Bridge::run_queued() {
  std::vector<kj::Function<void()>> batch;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      batch.swap(queue_);
      if (batch.empty()) {
        signaled_ = false;
        break;
      }
    }
    for (auto& fn : batch) fn();
    batch.clear();
  }
}

}  // namespace agentd::detail
