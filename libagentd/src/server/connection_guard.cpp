#include "connection_guard.h"

#include "value_codec.h"
#include "wire_limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <capnp/rpc.capnp.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

capnp::ReaderOptions ConnectionGuard::reader_options() { return wire_reader_options(); }

ConnectionGuard::ConnectionGuard(kj::AsyncIoStream& stream, std::string peer)
    : inner_(stream), peer_(std::move(peer)) {}

std::string ConnectionGuard::peer_address(kj::AsyncIoStream& stream) {
  sockaddr_storage addr{};
  kj::uint len = sizeof addr;
  try {
    stream.getpeername(reinterpret_cast<sockaddr*>(&addr), &len);
  } catch (const kj::Exception&) {
    return "unknown peer";  // not a socket (an in-process pipe)
  }
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, ntohs(in6->sin6_port));
  }
  if (addr.ss_family == AF_UNIX) return "a local socket";
  return "unknown peer";
}

void ConnectionGuard::note_closing(std::string reason) {
  if (!closed_for_.empty()) return;
  closed_for_ = std::move(reason);
  spdlog::warn("closing connection from {}: {}", peer_, closed_for_);
}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> ConnectionGuard::tryReadMessage(
    kj::ArrayPtr<kj::AutoCloseFd> fdSpace, capnp::ReaderOptions, kj::ArrayPtr<capnp::word> scratchSpace) {
  // The RPC system's own options are replaced by ours (it passes the network's defaults).
  return inner_.tryReadMessage(fdSpace, reader_options(), scratchSpace)
      .catch_([this](kj::Exception&& e) -> kj::Maybe<capnp::MessageReaderAndFds> {
        std::string why = e.getDescription().cStr();
        // A reset or an error on the socket is the peer's or the network's doing, not a bad
        // message; an end of stream inside a frame is a frame cut short, which is.
        const bool cut_short = why.find("Premature EOF") != std::string::npos ||
                               why.find("disconnected prematurely") != std::string::npos;
        if (cut_short)
          note_closing("bad frame: cut short (the peer closed its end inside a frame)");
        else if (e.getType() != kj::Exception::Type::DISCONNECTED)
          note_closing("bad frame: " + why);
        kj::throwFatalException(kj::mv(e));
      });
}

void ConnectionGuard::check_abort(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  if (!closed_for_.empty() || segments.size() == 0) return;
  try {
    capnp::SegmentArrayMessageReader reader(segments);
    auto msg = reader.getRoot<capnp::rpc::Message>();
    // An abort over a disconnect (the peer went away while something was in flight) is no
    // fault of the peer's messages; any other abort is a protocol error.
    if (msg.isAbort() && msg.getAbort().getType() != capnp::rpc::Exception::Type::DISCONNECTED)
      note_closing("protocol error: " + std::string(msg.getAbort().getReason().cStr()));
  } catch (const kj::Exception&) {
    // Not ours to judge: the RPC system built it.
  }
}

kj::Promise<void> ConnectionGuard::writeMessage(
    kj::ArrayPtr<const int> fds, kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  check_abort(segments);
  return inner_.writeMessage(fds, segments);
}

kj::Promise<void> ConnectionGuard::writeMessages(
    kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) {
  for (auto m : messages) check_abort(m);
  return inner_.writeMessages(messages);
}

}  // namespace agentd::detail
