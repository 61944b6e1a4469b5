// Logging in at an as_server's Gate (the bootstrap capability) with nothing but Cap'n Proto's
// generated code, as a client in another language would.
#pragma once

#include "agentd.capnp.h"

#include <capnp/rpc-twoparty.h>

#include <string>

namespace agentd::test {

// The AgentServer behind rpc's gate, pipelined on the login (usable at once; calls on it fail
// if the token is refused). Servers without --auth-token-file accept any token.
inline wire::AgentServer::Client raw_login(capnp::TwoPartyClient& rpc, const std::string& token = "") {
  auto req = rpc.bootstrap().castAs<wire::Gate>().loginRequest();
  req.setToken(token);
  return req.send().getServer();
}

}  // namespace agentd::test
