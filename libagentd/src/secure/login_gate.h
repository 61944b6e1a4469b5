// The Gate: the bootstrap capability of every connection to an as_server (schemas/agentd.capnp).
// A client logs in with a token and gets the AgentServer; nothing else is reachable before.
// Loop thread only.
#pragma once

#include <agentd/error.h>

#include "agentd.capnp.h"
#include "login_throttle.h"
#include "tokens.h"

#include <kj/async-io.h>
#include <kj/function.h>

#include <string>
#include <string_view>
#include <variant>

namespace agentd::detail {

// What every gate of one server shares; owned by the server, outlives its gates.
struct GateContext {
  TokenSet tokens;  // empty: authentication off, every token accepted
  LoginThrottle throttle;
};

// One login from peer (address: its throttle key): the digest of the accepted token, or the
// unauthenticated error to answer (a wrong or missing token, counted by the throttle, or an
// address the throttle refuses unchecked). What every gate and every lane hello runs.
std::variant<TokenSet::Digest, Error> check_login(GateContext& ctx, const std::string& peer,
                                                  const std::string& address, std::string_view token);

// The gate of one connection from peer ("address:port", for logs), whose failed logins the
// throttle counts by address (the address part of peer, net::address_part). make_server makes the AgentServer
// for this connection on the first good login, told the digest of the token that logged in; later logins on
// the connection get the same one.
using MakeServer = kj::Function<wire::AgentServer::Client(const TokenSet::Digest& token)>;
wire::Gate::Client make_gate(GateContext& ctx, std::string peer, std::string address, MakeServer make_server);

// A gate that refuses every login with unauthenticated and why (a plaintext client on a TLS
// server is told so over the only protocol it speaks).
wire::Gate::Client make_refusing_gate(std::string why);

}  // namespace agentd::detail
