// ConnectionGuard: the Cap'n Proto message stream of one accepted connection, with the checks a
// server facing untrusted clients needs. Loop thread only.
//
// - Every frame is read with explicit limits (kReaderOptions): a frame claiming more segments or
//   words than that, or nested deeper, is refused before anything is allocated for it.
// - A connection the server closes because of what the peer sent (a malformed or truncated
//   frame, a message the RPC protocol does not allow) is logged once, at warn, with the peer's
//   address and the reason; a peer that closes or resets its end is not logged.
// - Until set_logged_in(), the connection may send at most kPreLoginBytes in all (frames
//   included): a frame beginning before the login was accepted is refused, before anything is
//   allocated for it, when it would pass that budget. A frame beginning after is read with the
//   normal limits. (The login deadline and the cap on such connections are the server's.)
#pragma once

#include <capnp/message.h>
#include <capnp/serialize-async.h>
#include <kj/async-io.h>

#include <cstddef>
#include <string>

namespace agentd::detail {

class ConnectionGuard final : public capnp::MessageStream {
 public:
  // What every frame from a client is read with (wire_reader_options()). The traversal limit is
  // Cap'n Proto's 64 MiB (what clients and peers never exceed: they cut their messages at 8 MiB);
  // the nesting limit holds any value within kMaxValueDepth (deeper values are refused).
  static capnp::ReaderOptions reader_options();
  // What a connection may send before its login is accepted: the login takes a few hundred bytes.
  static constexpr std::size_t kPreLoginBytes = 64 * 1024;

  // stream is borrowed and outlives this; peer names the other end in the log ("1.2.3.4:5678").
  // tls: stream is a TLS session. A kj-tls peer writes a frame's pieces as separate records, so
  // one that goes away while writing (a client closing right after a refused login) leaves a
  // frame cut short: on TLS that is a peer going away, logged at debug, not a bad frame.
  ConnectionGuard(kj::AsyncIoStream& stream, std::string peer, bool tls = false);

  const std::string& peer() const { return peer_; }
  // The reason the connection was closed for, once it was; empty otherwise.
  const std::string& closed_for() const { return closed_for_; }
  // Logs "closing connection from PEER: reason" (warn), the first time only: the server is
  // closing it for what the peer did.
  void note_closing(std::string reason);
  // The connection's login was accepted: frames beginning from now on get the normal limits.
  void set_logged_in() { logged_in_ = true; }
  bool logged_in() const { return logged_in_; }

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

  // A read begun before the login: the first word is read here, and the frame is read with the
  // normal limits if the login was accepted meanwhile, else within what is left of the budget.
  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> read_before_login(
      kj::ArrayPtr<capnp::word> scratchSpace);
  // The rest of a frame whose first word is read: with the normal limits once logged in, else
  // within what is left of the pre-login budget.
  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> read_rest(kj::Array<kj::byte> first,
                                                               kj::ArrayPtr<capnp::word> scratchSpace);
  // Notes why a read failed (a bad frame, not a disconnect) and rethrows.
  [[noreturn]] void failed_read(kj::Exception&& e, bool budgeted);

  kj::AsyncIoStream& stream_;
  capnp::AsyncIoMessageStream inner_;
  std::string peer_;
  std::string closed_for_;
  bool tls_;
  bool logged_in_ = false;
  std::size_t pre_login_bytes_ = 0;  // read before the login was accepted
  bool budgeted_read_ = false;       // the frame being read counts against the pre-login budget
};

}  // namespace agentd::detail
