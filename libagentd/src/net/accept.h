// The accepting side of a connection to an as_server, before the RPC system gets it: who the
// peer is, whether it speaks TLS (its first byte), the TLS handshake, and the guard its messages
// are read through (connection_guard.h). The server's accept path (server_connections.cpp)
// uses these. Loop thread only.
#pragma once

#include "tls.h"

#include <chrono>
#include <kj/async-io.h>

#include <string>

namespace agentd::net {

// "1.2.3.4:5678", "[::1]:5678" or "unix" for a connected stream's peer; "unknown" when the
// stream cannot tell (an in-process pipe).
std::string peer_name(kj::AsyncIoStream& stream);

struct AcceptOptions {
  detail::TlsConfig* tls = nullptr;  // the server's TLS (borrowed); null: it serves plaintext
  bool unix_socket = false;          // accepted on the Unix socket, which is plaintext only
  bool lanes = false;                // the server serves synchronous lanes (LaneHello)
};

// The eight bytes a synchronous lane starts with (schemas/agentd.capnp, LaneHello).
inline constexpr char kLaneMagic[9] = "agdLANE1";

// A blocking socket's SO_RCVTIMEO or SO_SNDTIMEO (option) set to t (0: none): what bounds a
// lane's reads and writes on either side.
void set_socket_timeout(int fd, int option, std::chrono::milliseconds t);

// An accepted connection ready for the RPC system.
struct Accepted {
  kj::Own<kj::AsyncIoStream> stream;
  bool tls = false;           // stream is a TLS session
  bool tls_expected = false;  // a plaintext client of a TLS-only server: refuse its login
  // A synchronous lane (its magic read, stream null): the socket, now blocking and this
  // caller's to close. -1: an RPC connection.
  int lane_fd = -1;
};

// Reads the first byte of raw to tell a TLS handshake from a Cap'n Proto message, and then:
// a client that closes before saying anything, TLS on the Unix socket, or TLS to a server that
// does not serve it, is logged (at debug, or warn) and closed (null); TLS to a TLS server goes
// through the handshake and waits for the client's first message (a client that hangs up right
// after the handshake does not trust the certificate: logged at warn); plaintext to a TLS-only
// server is let through with tls_expected. A connection that starts with kLaneMagic, to a
// server with options.lanes, becomes a lane: its socket is handed over in lane_fd (tls_expected
// set on a TCP connection to a TLS-only server, which refuses its hello); other bytes there, or
// lanes off, close it. peer names the client in the log.
kj::Promise<kj::Maybe<Accepted>> accept_connection(kj::Own<kj::AsyncIoStream> raw, std::string peer,
                                                   AcceptOptions options);

}  // namespace agentd::net
