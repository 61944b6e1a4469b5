#include "accept.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::net {

std::string peer_name(kj::AsyncIoStream& stream) {
  sockaddr_storage ss{};
  uint len = sizeof ss;
  try {
    stream.getpeername(reinterpret_cast<sockaddr*>(&ss), &len);
  } catch (const kj::Exception&) {
    return "unknown";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return fmt::format("{}:{}", text, ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    return fmt::format("[{}]:{}", text, ntohs(a->sin6_port));
  }
  if (ss.ss_family == AF_UNIX) return "unix";
  return "unknown";
}

namespace {

using MaybeAccepted = kj::Maybe<Accepted>;

void log_hung_up_after_handshake(const std::string& peer, const std::string& how) {
  spdlog::warn(
      "{} finished the TLS handshake, then hung up without a request ({}): it may not "
      "trust this server's certificate (--tls-cert) or find another name in it; an "
      "as_server dialing this one needs the CA that signed it as its --peer-tls-ca",
      peer, how);
}

// After a TLS handshake: the session once the client sends something. A TLS client that does
// not trust this server's certificate (or finds another name in it) finishes the handshake,
// checks the certificate, and hangs up before sending anything: say so here too, since a peer
// server is where that mistake is usually made. (The server's login deadline bounds the wait.)
kj::Promise<MaybeAccepted> after_handshake(kj::Own<kj::AsyncIoStream> stream, std::string peer) {
  return detail::sniff_first_byte(kj::mv(stream))
      .then(
          [peer](detail::Sniffed s) -> MaybeAccepted {
            if (!s.empty) return Accepted{kj::mv(s.stream), true, false};
            log_hung_up_after_handshake(peer, "closed the connection");
            return nullptr;
          },
          [peer](kj::Exception&& e) -> MaybeAccepted {
            log_hung_up_after_handshake(peer, e.getDescription().cStr());
            return nullptr;
          });
}

// The rest of a lane's magic (its first byte read): the socket, made blocking, for the lane
// thread; the kj stream (which owns the original descriptor) is dropped.
kj::Promise<MaybeAccepted> accept_lane(kj::Own<kj::AsyncIoStream> stream, int fd, std::string peer,
                                       AcceptOptions options) {
  auto magic = kj::heapArray<kj::byte>(8);
  kj::byte* at = magic.begin();
  auto read = stream->tryRead(at, 8, 8);
  return read.then(
      [stream = kj::mv(stream), magic = kj::mv(magic), fd, peer, options](size_t n) mutable -> MaybeAccepted {
        if (n != 8 || std::memcmp(magic.begin(), kLaneMagic, 8) != 0) {
          spdlog::warn("{} sent bytes that are neither Cap'n Proto, TLS nor a lane's hello (closed)", peer);
          return nullptr;
        }
        if (!options.lanes || fd < 0) {
          spdlog::warn(
              "{} asked for a synchronous lane, which this server does not serve (closed; "
              "--lane-threads turns them on); its client uses the RPC connection",
              peer);
          return nullptr;
        }
        int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (own < 0 || ::fcntl(own, F_SETFL, ::fcntl(own, F_GETFL) & ~O_NONBLOCK) != 0) {
          spdlog::warn("{}: cannot take over its lane's socket: {} (closed)", peer, std::strerror(errno));
          if (own >= 0) ::close(own);
          return nullptr;
        }
        Accepted a;
        a.lane_fd = own;
        a.tls_expected = options.tls != nullptr && !options.unix_socket;
        return a;
      });
}

}  // namespace

kj::Promise<kj::Maybe<Accepted>> accept_connection(kj::Own<kj::AsyncIoStream> raw, std::string peer,
                                                   AcceptOptions options) {
  int fd = -1;
  KJ_IF_MAYBE (f, raw->getFd()) {
    fd = *f;
  }
  // The first byte tells a TLS handshake from a Cap'n Proto message and from a lane.
  return detail::sniff_first_byte(kj::mv(raw))
      .then(
          [peer, options, fd](detail::Sniffed s) -> kj::Promise<MaybeAccepted> {
            if (s.empty) return MaybeAccepted(nullptr);
            if (s.first == static_cast<kj::byte>(kLaneMagic[0]))
              return accept_lane(kj::mv(s.stream), fd, peer, options);
            if (options.unix_socket && !s.tls) return MaybeAccepted(Accepted{kj::mv(s.stream), false, false});
            if (options.unix_socket) {
              spdlog::warn(
                  "{} started a TLS handshake on the Unix socket, which is plaintext "
                  "(closed)",
                  peer);
              return MaybeAccepted(nullptr);
            }
            if (s.tls && options.tls == nullptr) {
              spdlog::warn(
                  "{} started a TLS handshake, but this server does not serve TLS "
                  "(closed; connect without TLS, or serve it with --tls-cert and "
                  "--tls-key)",
                  peer);
              return MaybeAccepted(nullptr);
            }
            if (!s.tls && options.tls != nullptr) {
              spdlog::warn(
                  "{} connected without TLS, but this server serves TLS only (its login "
                  "is refused saying so)",
                  peer);
              return MaybeAccepted(Accepted{kj::mv(s.stream), false, true});
            }
            if (!s.tls) return MaybeAccepted(Accepted{kj::mv(s.stream), false, false});
            return options.tls->accept(kj::mv(s.stream))
                .then(
                    [peer](kj::Own<kj::AsyncIoStream> stream) {
                      return after_handshake(kj::mv(stream), peer);
                    },
                    [peer](kj::Exception&& e) -> kj::Promise<MaybeAccepted> {
                      spdlog::warn("TLS handshake with {} failed: {}", peer, e.getDescription().cStr());
                      return MaybeAccepted(nullptr);
                    });
          },
          [peer](kj::Exception&& e) -> kj::Promise<MaybeAccepted> {
            spdlog::debug("connection from {} closed before it said anything: {}", peer,
                          e.getDescription().cStr());
            return MaybeAccepted(nullptr);
          });
}

void set_socket_timeout(int fd, int option, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

}  // namespace agentd::net
