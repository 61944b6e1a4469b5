// ConnectionGuard: the Cap'n Proto message stream of one accepted connection, with the checks a
// server facing untrusted clients needs. Loop thread only.
//
// - Every frame is read with explicit limits (kReaderOptions): a frame claiming more segments or
//   words than that, or nested deeper, is refused before anything is allocated for it.
// - A connection the server closes because of what the peer sent (a malformed or truncated
//   frame, a message the RPC protocol does not allow) is logged once, at warn, with the peer's
//   address and the reason; a peer that closes or resets its end is not logged.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize-async.h>
#include <kj/async-io.h>

#include <string>

namespace agentd::detail {

class ConnectionGuard final : public capnp::MessageStream {
 public:
  // What every frame from a client is read with (wire_reader_options()). The traversal limit is
  // Cap'n Proto's 64 MiB (what clients and peers never exceed: they cut their messages at 8 MiB);
  // the nesting limit holds any value within kMaxValueDepth (deeper values are refused).
  static capnp::ReaderOptions reader_options();

  // stream is borrowed and outlives this; peer names the other end in the log ("1.2.3.4:5678").
  ConnectionGuard(kj::AsyncIoStream& stream, std::string peer);

  // "ip:port" of the stream's other end ("unknown peer" when the OS cannot say).
  static std::string peer_address(kj::AsyncIoStream& stream);

  const std::string& peer() const { return peer_; }
  // The reason the connection was closed for, once it was; empty otherwise.
  const std::string& closed_for() const { return closed_for_; }
  // Logs "closing connection from PEER: reason" (warn), the first time only: the server is
  // closing it for what the peer did.
  void note_closing(std::string reason);

  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> tryReadMessage(
      kj::ArrayPtr<kj::AutoCloseFd> fdSpace, capnp::ReaderOptions options,
      kj::ArrayPtr<capnp::word> scratchSpace) override;
  kj::Promise<void> writeMessage(kj::ArrayPtr<const int> fds,
                                 kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) override;
  kj::Promise<void> writeMessages(
      kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) override;
  kj::Maybe<int> getSendBufferSize() override { return inner_.getSendBufferSize(); }
  kj::Promise<void> end() override { return inner_.end(); }

 private:
  // An Abort message among what the RPC system sends: it is closing the connection over a
  // protocol error, whose description the message carries.
  void check_abort(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments);

  capnp::AsyncIoMessageStream inner_;
  std::string peer_;
  std::string closed_for_;
};

}  // namespace agentd::detail
