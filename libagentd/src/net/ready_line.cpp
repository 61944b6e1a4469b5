#include "ready_line.h"

#include <agentd/error.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>

namespace agentd::net {

namespace {
constexpr std::string_view kReadyPrefix = "as_server ready: listening on ";
constexpr std::string_view kServerId = "server_id=";
}  // namespace

std::optional<ReadyLine> parse_ready_line(std::string_view line) {
  auto at = line.find(kReadyPrefix);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + kReadyPrefix.size());
  auto endpoint = Endpoint::try_parse(rest.substr(0, rest.find(' ')));
  if (!endpoint) return std::nullopt;
  ReadyLine ready{*endpoint, {}};
  auto sid = rest.find(kServerId);
  if (sid != std::string_view::npos) {
    auto id = rest.substr(sid + kServerId.size());
    ready.server_id = std::string(id.substr(0, id.find(' ')));
  }
  return ready;
}

ReadyWait wait_ready_line(detail::Subprocess& process, std::chrono::milliseconds timeout, std::string* seen) {
  const int fd = process.stdout_pipe().get();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string buf;
  ReadyWait w;
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      w.outcome = ReadyWait::Outcome::timed_out;
      return w;
    }
    pollfd pfd{fd, POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 100)));
    if (n < 0 && errno != EINTR)
      throw Error(ErrorCode::internal, fmt::format("poll: {}", std::strerror(errno)));
    if (n > 0) {
      char chunk[512];
      ssize_t got = ::read(fd, chunk, sizeof chunk);
      if (got > 0) {
        buf.append(chunk, static_cast<std::size_t>(got));
        if (seen != nullptr) seen->append(chunk, static_cast<std::size_t>(got));
      }
      std::size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        if (auto ready = parse_ready_line(line)) {
          w.outcome = ReadyWait::Outcome::ready;
          w.ready = std::move(ready);
          w.line = std::move(line);
          return w;
        }
      }
      if (got <= 0) {  // stdout closed: the process is exiting
        w.outcome = ReadyWait::Outcome::closed;
        return w;
      }
    }
    if (auto status = process.try_wait()) {
      w.outcome = ReadyWait::Outcome::exited;
      w.status = status;
      return w;
    }
  }
}

}  // namespace agentd::net
