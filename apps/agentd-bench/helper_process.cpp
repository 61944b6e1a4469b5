#include "helper_process.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <stdexcept>

namespace agentd::bench {

HelperProcess start_helper(std::vector<std::string> args, const std::string& what) {
  detail::SpawnOptions spawn;
  spawn.argv = {"/proc/self/exe"};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.in = detail::Redirect::pipe();
  spawn.out = detail::Redirect::pipe();
  HelperProcess h;
  h.process = detail::Subprocess::spawn(spawn);
  char c;
  while (::read(h.process.stdout_pipe().get(), &c, 1) == 1 && c != '\n') h.port_line += c;
  if (h.port_line.rfind("PORT ", 0) != 0)
    throw std::runtime_error(what + " did not start (it said \"" + h.port_line + "\")");
  return h;
}

void stop_helper(HelperProcess& helper) {
  helper.process.stdin_pipe() = nullptr;
  helper.process.terminate(std::chrono::seconds(5));
}

namespace {

kj::Promise<void> parent_closed_stdin(kj::AsyncIoContext& io) {
  struct stat st {};
  if (fstat(0, &st) != 0 || !S_ISFIFO(st.st_mode)) return kj::NEVER_DONE;
  auto in = io.lowLevelProvider->wrapInputFd(0);
  auto buffer = kj::heapArray<kj::byte>(256);
  struct Reader {
    static kj::Promise<void> loop(kj::AsyncInputStream& s, kj::ArrayPtr<kj::byte> d) {
      return s.tryRead(d.begin(), 1, d.size()).then([&s, d](std::size_t n) -> kj::Promise<void> {
        if (n == 0) return kj::READY_NOW;
        return loop(s, d);
      });
    }
  };
  auto& stream = *in;
  auto data = buffer.asPtr();
  return Reader::loop(stream, data).attach(kj::mv(in), kj::mv(buffer));
}

}  // namespace

void capture_stop_signals() {
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGINT);
}

kj::Promise<void> told_to_stop(kj::AsyncIoContext& io) {
  return io.unixEventPort.onSignal(SIGTERM)
      .ignoreResult()
      .exclusiveJoin(io.unixEventPort.onSignal(SIGINT).ignoreResult())
      .exclusiveJoin(parent_closed_stdin(io));
}

}  // namespace agentd::bench
