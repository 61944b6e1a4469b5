// The batched call path of one client connection (Session in the schema): many calls per
// Session.submit in, many completions per CallSink.done out. Loop thread only.
#pragma once

#include "rpc_server.h"

#include "agentd.capnp.h"

namespace agentd::detail {

// A session whose completions go to sink. ctx outlives it.
wire::Session::Client make_session(RpcContext& ctx, wire::CallSink::Client sink);

}  // namespace agentd::detail
