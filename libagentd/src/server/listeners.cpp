// Server: listening. The TCP port (and the address peers and agent references name), the
// --metrics-port endpoint, and the --unix-socket (a liveness probe for a socket file left
// behind, then its mode and group). Accepting on them is in server_connections.cpp.
#include "server.h"

#include "endpoint.h"
#include "value_codec.h"

#include <agentd/error.h>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {

// kj says "::bind(...): Address already in use; toString() = ..."; keeps the OS's reason.
std::string bind_failure(const kj::Exception& e) {
  std::string why = e.getDescription().cStr();
  if (auto colon = why.find("): "); colon != std::string::npos) why = why.substr(colon + 3);
  if (auto semi = why.find(';'); semi != std::string::npos) why = why.substr(0, semi);
  return why;
}

}  // namespace

std::uint16_t Server::listen() {
  kj::Own<kj::NetworkAddress> addr;
  try {
    addr = io_.provider->getNetwork()
               .parseAddress(to_kj(options_.host), static_cast<uint>(options_.port))
               .wait(io_.waitScope);
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("--host {}: cannot resolve: {}", options_.host, e.getDescription().cStr()));
  }
  try {
    listener_ = addr->listen();
  } catch (const kj::Exception& e) {
    std::string why = bind_failure(e);
    throw Error(ErrorCode::config_error,
                fmt::format("cannot listen on {}:{}: {}{}", options_.host, options_.port, why,
                            options_.port != 0 ? " (is another server using this port? pick "
                                                 "another with --port, or --port 0 for a free one)"
                                               : ""));
  }
  auto port = static_cast<std::uint16_t>(listener_->getPort());
  if (options_.advertise_address.empty()) {
    std::string host = options_.host;
    if (host == "0.0.0.0" || host == "::" || host == "*") {
      char name[256] = {};
      host = ::gethostname(name, sizeof name - 1) == 0 ? name : "127.0.0.1";
    }
    advertise_ = fmt::format("{}:{}", host, port);
  } else {
    advertise_ = options_.advertise_address;
  }
  if (options_.metrics_port != 0) {
    try {
      auto metrics_addr = io_.provider->getNetwork()
                              .parseAddress(to_kj(options_.host), static_cast<uint>(options_.metrics_port))
                              .wait(io_.waitScope);
      metrics_ = std::make_unique<MetricsEndpoint>(metrics_addr->listen(), io_.provider->getTimer(),
                                                   [this] { return render_metrics(stats()); });
    } catch (const kj::Exception& e) {
      listener_ = nullptr;
      throw Error(ErrorCode::config_error,
                  fmt::format("--metrics-port: cannot listen on {}:{}: {} (pick another port, "
                              "or 0 to turn metrics off)",
                              options_.host, options_.metrics_port, bind_failure(e)));
    }
    spdlog::info("metrics at http://{}:{}/metrics", options_.host, metrics_->port());
  }
  if (!options_.unix_socket.empty()) {
    try {
      listen_unix();
    } catch (...) {
      listener_ = nullptr;
      metrics_ = nullptr;
      throw;
    }
  }
  if (options_.lane_threads > 0) {
    const auto hello_timeout =
        std::chrono::milliseconds(static_cast<std::int64_t>(options_.login_timeout * 1000));
    lanes_ = std::make_unique<Lanes>(
        host_,
        Lanes::Options{
            options_.lane_threads, hello_timeout,
            std::chrono::milliseconds(static_cast<std::int64_t>(options_.lane_idle_timeout * 1000)),
            options_.max_message_bytes, id_, std::chrono::microseconds(options_.lane_spin_us)},
        [this, hello_timeout](const std::string& token,
                              const std::string& peer) -> std::variant<TokenSet::Digest, Error> {
          // The gate's state (tokens, the failed-login throttle) is the loop thread's.
          std::promise<std::variant<TokenSet::Digest, Error>> verdict;
          auto answer = verdict.get_future();
          host_.on_loop([this, verdict = std::move(verdict), token, peer]() mutable {
            verdict.set_value(check_login(gate_, peer, net::address_part(peer), token));
          });
          try {
            if (answer.wait_for(hello_timeout) == std::future_status::ready) return answer.get();
          } catch (const std::future_error&) {
            // Dropped unrun: the server is stopping.
          }
          return Error(ErrorCode::stopping, "the server is shutting down", "", "", true);
        });
    spdlog::info("serving up to {} synchronous lanes (--lane-threads)", options_.lane_threads);
  }
  accepting_ = accept_loop(*listener_, false).eagerlyEvaluate([](kj::Exception&& e) {
    spdlog::error("accepting connections failed: {}", e.getDescription().cStr());
  });
  if (unix_listener_)
    accepting_unix_ = accept_loop(*unix_listener_, true).eagerlyEvaluate([](kj::Exception&& e) {
      spdlog::error("accepting connections on --unix-socket failed: {}", e.getDescription().cStr());
    });
  return port;
}

void Server::listen_unix() {
  const std::string& path = options_.unix_socket;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw Error(ErrorCode::config_error,
                  fmt::format("--unix-socket {}: exists and is not a socket (remove it or pick "
                              "another path)",
                              path));
    // A socket file: in use if something accepts on it, else left over from a crash.
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    bool live = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    if (fd >= 0) ::close(fd);
    if (live)
      throw Error(ErrorCode::config_error,
                  fmt::format("--unix-socket {}: another server is listening there", path));
    ::unlink(path.c_str());
  }
  try {
    auto addr = io_.provider->getNetwork().parseAddress(to_kj("unix:" + path)).wait(io_.waitScope);
    unix_listener_ = addr->listen();
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("--unix-socket {}: cannot listen: {}", path, bind_failure(e)));
  }
  gid_t gid = static_cast<gid_t>(-1);
  if (!options_.unix_socket_group.empty()) {
    struct group* g = ::getgrnam(options_.unix_socket_group.c_str());
    if (g == nullptr) {
      unix_listener_ = nullptr;
      ::unlink(path.c_str());
      throw Error(ErrorCode::config_error,
                  fmt::format("--unix-socket-group {}: no such group", options_.unix_socket_group));
    }
    gid = g->gr_gid;
  }
  if (::chmod(path.c_str(), 0660) != 0 ||
      (gid != static_cast<gid_t>(-1) && ::chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0)) {
    int err = errno;
    unix_listener_ = nullptr;
    ::unlink(path.c_str());
    throw Error(ErrorCode::config_error,
                fmt::format("--unix-socket {}: cannot set its mode or group: {}", path, std::strerror(err)));
  }
  spdlog::info("also listening on unix:{} (mode 0660{})", path,
               options_.unix_socket_group.empty() ? "" : ", group " + options_.unix_socket_group);
}

}  // namespace agentd::detail
