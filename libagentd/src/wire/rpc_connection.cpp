#include "rpc_connection.h"

#include "value_codec.h"
#include "wire_limits.h"

namespace agentd::detail {

RpcConnection::RpcConnection(kj::AsyncIoStream& stream)
    : network_(stream, capnp::rpc::twoparty::Side::CLIENT, wire_reader_options()),
      rpc_(capnp::makeRpcClient(network_)) {}

capnp::Capability::Client RpcConnection::bootstrap() {
  capnp::word scratch[4] = {};
  capnp::MallocMessageBuilder message(scratch);
  auto vat = message.getRoot<capnp::rpc::twoparty::VatId>();
  vat.setSide(capnp::rpc::twoparty::Side::SERVER);
  return rpc_.bootstrap(vat);
}

}  // namespace agentd::detail
