// as_server: hosts agents loaded from plugins and serves them over Cap'n Proto RPC.
// main() is the wiring diagram: options -> logging -> signals -> server -> listen -> ready -> run.
#include "crash_report.h"
#include "log.h"
#include "pooled_connector.h"
#include "sd_notify.h"
#include "server.h"
#include "server_config.h"

#include <agentd/error.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

// Sanitized builds (scripts/test.sh): the Python host (--agent-dir) starts CPython in this process
// and never finalizes it (CPython cannot be started twice in one process, and finalizing with
// agent threads about is unsafe), so the interpreter's memory is still allocated at exit by
// design. LeakSanitizer is told to leave allocations made by libpython alone; it still checks
// every other allocation of the server.
#if defined(__SANITIZE_ADDRESS__)
#define AGENTD_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AGENTD_LSAN 1
#endif
#endif
#ifdef AGENTD_LSAN
extern "C" __attribute__((visibility("default"), used)) const char* __lsan_default_suppressions() {
  return "leak:libpython3\n";
}
#endif

namespace {

// Exit codes (also in --help): systemd's RestartPreventExitStatus lists the configuration ones.
constexpr int kExitOk = 0;
constexpr int kExitBadConfig = 2;
constexpr int kExitCannotListen = 3;
constexpr int kExitPlugin = 4;
constexpr int kExitInternal = 1;

int exit_code_for(const agentd::Error& e) {
  switch (e.code()) {
    case agentd::ErrorCode::plugin_error:
      return kExitPlugin;
    case agentd::ErrorCode::config_error:
    case agentd::ErrorCode::bad_args:
      return kExitBadConfig;
    default:
      return kExitInternal;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using agentd::detail::ParsedArgs;
  ParsedArgs args;
  try {
    args = agentd::detail::parse_server_args(argc, argv);
  } catch (const agentd::Error& e) {
    std::cerr << "as_server: " << e.message() << "\n";
    return kExitBadConfig;
  }
  if (args.action != ParsedArgs::Action::run) {
    std::cout << args.text;
    return kExitOk;
  }
  const auto& opts = args.options;
  agentd::detail::setup_logging(opts.log_level, opts.log_format);

  // One descriptor per client connection: take every descriptor the hard limit allows (the soft
  // limit is often 1024, which a few hundred clients and peers would exhaust).
  if (rlimit fds{}; ::getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < fds.rlim_max) {
    const rlim_t soft = fds.rlim_cur;
    fds.rlim_cur = fds.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &fds) != 0)
      spdlog::warn(
          "cannot raise the open file limit from {} to {}: connections past about {} "
          "are refused",
          soft, fds.rlim_max, soft);
  }

  // Signals are taken by the event loop; they must be blocked before any thread starts.
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGHUP);
  ::signal(SIGPIPE, SIG_IGN);
  // A file size limit reached while saving state: the write fails (EFBIG) and the state store
  // reports it (calls fail not_applied) instead of the process being killed.
  ::signal(SIGXFSZ, SIG_IGN);
  // A crash in agent code names the call that was running (and, with --state-dir, marks it
  // interrupted for the next start).
  agentd::detail::install_crash_report();

  try {
    auto io = kj::setupAsyncIo();
    // systemd's Type=notify protocol (a no-op without $NOTIFY_SOCKET); outlives the server.
    auto notifier = agentd::detail::SdNotifier::from_environment();
    agentd::detail::Server server(opts, io, {}, agentd::detail::pooled_agent_connector());
    std::uint16_t port;
    try {
      port = server.listen();
    } catch (const agentd::Error& e) {
      std::cerr << "as_server: " << e.message() << "\n";
      return kExitCannotListen;
    }
    server.handle_signals();
    if (server.requires_token())
      spdlog::info("clients must log in with a token from {}", opts.auth_token_file);
    else
      spdlog::info("no --auth-token-file: any client that reaches {}:{} is let in", opts.host, port);
    if (opts.state_dir.empty())
      spdlog::info("no --state-dir: agents and results live in memory only; a restart loses them");
    spdlog::info("as_server {} (id {}) serving {} class(es) on {}:{}", agentd::version(), server.id(),
                 server.class_names().size(), opts.host, port);
    // The one line on stdout: child mode and scripts read the port from it.
    std::printf("as_server ready: listening on %s:%u server_id=%s pid=%d\n", opts.host.c_str(),
                static_cast<unsigned>(port), server.id().c_str(), static_cast<int>(::getpid()));
    std::fflush(stdout);
    notifier.notify(
        fmt::format("READY=1\nSTATUS=serving on {}:{}: {}", opts.host, port, server.status_text()));
    server.attach_notifier(notifier);
    server.run().wait(io.waitScope);
    if (!server.idle()) {
      // Calls still running past the grace period: do not wait for agent code to return.
      spdlog::warn("exiting with calls still running");
      spdlog::shutdown();
      std::fflush(nullptr);
      ::_exit(kExitOk);
    }
    spdlog::info("stopped");
  } catch (const agentd::Error& e) {
    std::cerr << "as_server: " << e.message() << "\n";
    return exit_code_for(e);
  } catch (const kj::Exception& e) {
    std::cerr << "as_server: internal error: " << e.getDescription().cStr() << "\n";
    return kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "as_server: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
  return kExitOk;
}
