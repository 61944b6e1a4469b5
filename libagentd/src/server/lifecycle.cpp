// Server: its life after the wiring. Housekeeping on a timer (result sweeps, malloc_trim),
// stopping on SIGINT/SIGTERM or stdin's end and reloading on SIGHUP, keeping systemd informed
// (sd_notify), and the stop: drain the running calls, then settle their completions.
#include "server.h"

#include <agentd/error.h>

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

kj::Promise<void> Server::sweep_loop() {
  return io_.provider->getTimer().afterDelay(1 * kj::SECONDS).then([this]() {
    host_.sweep_results();
    // Memory freed by one thread and allocated by another (calls, completions, the state
    // store's writer) leaves free pages scattered over glibc's arenas: hand them back to the
    // system every 10 s, on a worker (it walks every arena). as_server itself links jemalloc
    // (apps/as_server), where this does nothing; it serves servers in programs on glibc's
    // malloc (local mode).
    if (++sweeps_ % 10 == 0) workers_.submit([] { ::malloc_trim(0); });
    return sweep_loop();
  });
}

kj::Promise<void> Server::watch_stdin() {
  auto in = io_.lowLevelProvider->wrapInputFd(STDIN_FILENO);
  auto buf = kj::heapArray<kj::byte>(256);
  auto read = in->tryRead(buf.begin(), 1, buf.size());
  return read.then(
      [this, in = kj::mv(in), buf = kj::mv(buf)](size_t n) mutable -> kj::Promise<void> {
        if (n == 0) {
          spdlog::info("standard input closed (parent gone): stopping");
          request_stop();
          return kj::READY_NOW;
        }
        return watch_stdin();
      },
      [this](kj::Exception&&) { request_stop(); });
}

void Server::handle_signals() {
  tasks_.add(signal_loop(SIGINT));
  tasks_.add(signal_loop(SIGTERM));
  tasks_.add(signal_loop(SIGHUP));
}

kj::Promise<void> Server::signal_loop(int signo) {
  return io_.unixEventPort.onSignal(signo).then([this, signo](siginfo_t) {
    if (signo == SIGHUP) {
      if (notifier_)
        notifier_->notify(fmt::format("RELOADING=1\nMONOTONIC_USEC={}",
                                      std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count()));
      KJ_DEFER(if (notifier_) notifier_->notify("READY=1\nSTATUS=" + status_text()));
      try {
        if (options_.model_config_path.empty()) {
          spdlog::info("SIGHUP: no --model-config-path to reload");
        } else {
          auto v = reload_models();
          spdlog::info("SIGHUP: reloaded model configs from {} (version {})", options_.model_config_path, v);
        }
      } catch (const Error& e) {
        spdlog::error("SIGHUP: kept the previous model configs: {}", e.message());
      }
      reload_tokens_logged("SIGHUP");
      reload_tools_logged("SIGHUP");
    } else {
      spdlog::info("{}: stopping", signo == SIGINT ? "SIGINT" : "SIGTERM");
      request_stop();
    }
    return signal_loop(signo);
  });
}

void Server::request_stop() {
  if (stop_fulfiller_ && stop_fulfiller_->isWaiting()) stop_fulfiller_->fulfill();
}

kj::Promise<void> Server::run() {
  return kj::mv(stop_promise_).then([this]() {
    stopping_ = true;
    if (notifier_) notifier_->notify("STOPPING=1\nSTATUS=stopping: " + status_text());
    accepting_ = nullptr;  // stop accepting: cancel the pending accept, then close the socket
    listener_ = nullptr;
    accepting_unix_ = nullptr;
    if (unix_listener_) {
      unix_listener_ = nullptr;
      ::unlink(options_.unix_socket.c_str());
    }
    host_.begin_stop();
    auto deadline = io_.provider->getTimer().now() +
                    static_cast<std::int64_t>(options_.shutdown_grace * 1000) * kj::MILLISECONDS;
    if (host_.running_calls() > 0)
      spdlog::info("waiting up to {} s for {} running call(s)", options_.shutdown_grace,
                   host_.running_calls());
    return drain(deadline).then([this, deadline]() { return settle(deadline); }).then([this]() {
      return tools_.stop(2 * kj::SECONDS);
    });  // stdin closed, then signals
  });
}

kj::Promise<void> Server::settle(kj::TimePoint deadline) {
  // The last calls' completions are posted to the bridge, gather in their session's outbox for
  // a loop turn, leave as messages queued behind the connection's earlier writes, and are then
  // written. A marker posted now runs after every completion posted before it; a few more turns
  // let the outboxes flush and the writes start; then wait for the writes to finish.
  auto marker = kj::newPromiseAndFulfiller<void>();
  bridge_.post([f = kj::mv(marker.fulfiller)]() mutable { f->fulfill(); });
  const auto limit = std::min(deadline, io_.provider->getTimer().now() + 2 * kj::SECONDS);
  return marker.promise.then([]() { return kj::evalLater([]() {}); })
      .then([]() { return kj::evalLater([]() {}); })
      .then([]() { return kj::evalLater([]() {}); })
      .then([this, limit]() { return wait_for_writes(limit, 0); });
}

kj::Promise<void> Server::wait_for_writes(kj::TimePoint limit, int quiet_checks) {
  auto& timer = io_.provider->getTimer();
  // Twice in a row with nothing in flight: no message is still on its way to a socket.
  quiet_checks = writes_in_flight_ == 0 ? quiet_checks + 1 : 0;
  if (quiet_checks >= 2 || timer.now() >= limit) return kj::READY_NOW;
  return timer.afterDelay(1 * kj::MILLISECONDS).then([this, limit, quiet_checks]() {
    return wait_for_writes(limit, quiet_checks);
  });
}

kj::Promise<void> Server::drain(kj::TimePoint deadline) {
  auto& timer = io_.provider->getTimer();
  // Settled rather than no call running: the thread that finished the last call may not have
  // posted its outcome yet, and settle()'s marker must come after it.
  if (host_.settled()) {
    // The last calls' commits, so their completions can go out; a disk that stalls past the
    // grace period does not hold the stop (what it has not committed was never acknowledged).
    const auto left = deadline - timer.now();
    if (store_ &&
        !store_->flush_for(std::chrono::milliseconds(std::max<std::int64_t>(0, left / kj::MILLISECONDS)))) {
      spdlog::warn(
          "grace period over; the state store's last write has not finished (the disk "
          "stalls): exiting without it; calls not yet in its commit log were never reported "
          "done, and the next start applies those that are");
      store_stalled_ = true;
    }
    return kj::READY_NOW;
  }
  if (timer.now() >= deadline) {
    spdlog::warn("grace period over; {} call(s) still running are abandoned", host_.running_calls());
    return kj::READY_NOW;
  }
  return timer.afterDelay(10 * kj::MILLISECONDS).then([this, deadline]() { return drain(deadline); });
}

void Server::attach_notifier(const SdNotifier& notifier) {
  notifier_ = &notifier;
  if (!notifier.enabled()) return;
  // Half the watchdog timeout (sd_watchdog_enabled(3)); STATUS= refreshes at most every 5 s.
  auto interval = 5 * kj::SECONDS;
  if (auto wd = notifier.watchdog_timeout(); wd.count() > 0)
    interval = std::min(interval, wd.count() / 2 * kj::MICROSECONDS);
  tasks_.add(notify_loop(interval));
}

kj::Promise<void> Server::notify_loop(kj::Duration interval) {
  // Runs on this loop: a wedged loop stops the pings, and systemd restarts us.
  std::string state = std::string("STATUS=") + (stopping_ ? "stopping: " : "serving: ") + status_text();
  if (notifier_->watchdog_timeout().count() > 0) state = "WATCHDOG=1\n" + state;
  notifier_->notify(state);
  return io_.provider->getTimer().afterDelay(interval).then(
      [this, interval]() { return notify_loop(interval); });
}

}  // namespace agentd::detail
