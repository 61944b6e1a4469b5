// RpcConnection: the client end of a two-party Cap'n Proto connection (what
// capnp::TwoPartyClient is), reading every message with wire_reader_options() so that any value
// within kMaxValueDepth decodes. Used by the client library and by peer connections. Loop
// thread only; the stream is borrowed and outlives this.
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

namespace agentd::detail {

class RpcConnection {
 public:
  explicit RpcConnection(kj::AsyncIoStream& stream);

  // The other end's bootstrap capability.
  capnp::Capability::Client bootstrap();
  // Resolves when the connection is gone.
  kj::Promise<void> onDisconnect() { return network_.onDisconnect(); }

 private:
  capnp::TwoPartyVatNetwork network_;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc_;
};

}  // namespace agentd::detail
