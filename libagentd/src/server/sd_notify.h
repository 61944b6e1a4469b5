// SdNotifier: the service-manager notification protocol (sd_notify(3)) without libsystemd.
// Under systemd with Type=notify, $NOTIFY_SOCKET names a unix datagram socket (a path, or an
// abstract name written with a leading '@'); each notification is one datagram of
// newline-separated KEY=VALUE assignments (READY=1, STATUS=..., STOPPING=1, WATCHDOG=1, ...).
// Outside systemd (no $NOTIFY_SOCKET) every call is a cheap no-op.
//
// Thread-safety: notify() may be called from any thread (one sendto per call).
#pragma once

#include <kj/io.h>

#include <chrono>
#include <string>
#include <string_view>

namespace agentd::detail {

class SdNotifier {
 public:
  // Disabled: notify() does nothing.
  SdNotifier() = default;
  // socket: as in $NOTIFY_SOCKET ("/run/systemd/notify" or "@abstract"); empty disables.
  // watchdog: how often the service manager expects WATCHDOG=1 at the latest (0: no watchdog).
  explicit SdNotifier(std::string socket, std::chrono::microseconds watchdog = {});
  ~SdNotifier();
  SdNotifier(SdNotifier&& other) noexcept;
  SdNotifier& operator=(SdNotifier&& other) noexcept;
  SdNotifier(const SdNotifier&) = delete;
  SdNotifier& operator=(const SdNotifier&) = delete;

  // Reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID (the watchdog applies only when
  // WATCHDOG_PID is unset or names this process), like sd_watchdog_enabled(3).
  static SdNotifier from_environment();

  bool enabled() const { return !socket_.empty(); }
  // Zero when no watchdog is configured. Ping at half of it (sd_watchdog_enabled(3) advice).
  std::chrono::microseconds watchdog_timeout() const { return watchdog_; }

  // Sends one datagram with state (e.g. "READY=1\nSTATUS=serving"). Best-effort: returns false
  // (and never throws) when disabled or when the send fails; a missing manager must not stop us.
  bool notify(std::string_view state) const;

 private:
  std::string socket_;
  std::chrono::microseconds watchdog_{0};
  kj::AutoCloseFd fd_;  // an unbound AF_UNIX SOCK_DGRAM socket, opened by the constructor
};

}  // namespace agentd::detail
