// dial: the one way a client or a server reaches an as_server. Resolve the endpoint, connect,
// TLS when asked, count the bytes, open the Cap'n Proto connection, log in at the Gate and ask
// the server who it is; and when that fails, which of those stages did. The client
// (client_core.cpp) and the peer pool (peer_pool.cpp) each turn a failed stage into their own
// advice. Loop thread only.
#pragma once

#include "agentd.capnp.h"
#include "counting_stream.h"
#include "endpoint.h"
#include "rpc_connection.h"
#include "tls.h"

#include <agentd/error.h>

#include <kj/async-io.h>

#include <chrono>
#include <optional>
#include <string>

namespace agentd::net {

enum class DialStage { resolve, connect, tls, login, info };
const char* stage_name(DialStage stage);  // "resolve", "connect", "TLS", "login", "info"

struct DialOptions {
  // TLS (borrowed, outlives the connection); null, or a unix: endpoint: plaintext.
  detail::TlsConfig* tls = nullptr;
  // Counts the connection's traffic (borrowed, outlives the connection); null: not counted.
  detail::ByteCount* bytes = nullptr;
  std::string token;  // logged in with
  // Each stage must finish within stage_limit, and the whole dial within total_limit (zero:
  // no such limit). A limit that runs out fails the stage with an OVERLOADED exception.
  std::chrono::milliseconds stage_limit{0};
  std::chrono::milliseconds total_limit{0};
};

// A dial's result: a logged-in connection, or how far it got and why it stopped there.
struct Dialed {
  // All set when ok(); all null otherwise (nothing half-made is kept).
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<detail::RpcConnection> rpc;  // on stream
  wire::AgentServer::Client server = nullptr;
  std::string server_id;   // what the server says it is
  std::string advertised;  // its advertised address; empty when it advertises none

  // How far the dial got: on a failure, the stage that failed.
  DialStage stage = DialStage::resolve;
  std::optional<kj::Exception> failed;  // the stage broke with this
  std::optional<Error> refused;         // the Gate answered the login with this error
  bool ok() const { return !failed && !refused; }
};

// Dials to. Never rejects: a failure is in the result. io is borrowed and outlives the dial.
kj::Promise<kj::Own<Dialed>> dial(kj::AsyncIoContext& io, const Endpoint& to, DialOptions options);

}  // namespace agentd::net
