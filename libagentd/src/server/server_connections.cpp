// Server: accepting connections and serving each one: telling TLS from plaintext, the TLS
// handshake, the login at the Gate (within --login-timeout, as one of at most
// --max-unauthenticated-connections), then the RPC connection.
#include "server.h"

#include "accept.h"
#include "connection_guard.h"
#include "buffered_stream.h"
#include "counting_stream.h"
#include "endpoint.h"

#include <fmt/format.h>
#include <optional>
#include <set>
#include <spdlog/spdlog.h>

namespace agentd::detail {

kj::Promise<void> Server::accept_loop(kj::ConnectionReceiver& listener, bool local) {
  // run() cancels this loop before it drops the listener, so the listener outlives it.
  return listener.accept().then(
      [this, &listener, local](kj::Own<kj::AsyncIoStream> stream) -> kj::Promise<void> {
        if (accept_failing_) spdlog::info("accepting connections again");
        accept_failing_ = false;
        tasks_.add(serve(kj::mv(stream), local));
        return accept_loop(listener, local);
      },
      [this, &listener, local](kj::Exception&& e) -> kj::Promise<void> {
        // Out of file descriptors (EMFILE: too many open connections) or another passing
        // failure: keep serving the connections there are and try again shortly, rather than
        // never accepting again. Logged once until an accept succeeds.
        if (!accept_failing_)
          spdlog::error("cannot accept connections (retrying every 100 ms): {}", e.getDescription().cStr());
        accept_failing_ = true;
        return io_.provider->getTimer().afterDelay(100 * kj::MILLISECONDS).then([this, &listener, local]() {
          return accept_loop(listener, local);
        });
      });
}

// Each connection gets its own bootstrap object, so a fetch (which only peer servers send)
// can move the connection's byte counts from "client" to "peer", and its own copy of the RPC
// context, whose close_connection ends this connection.
// Registered in the server's live connections while it exists (for reload_tokens()).
struct Server::Connection {
  Connection(const RpcContext& shared, std::set<Connection*>& live) : ctx(shared), live(live) {
    live.insert(this);
  }
  ~Connection() { live.erase(this); }
  RpcContext ctx;  // destroyed last: the RPC objects below borrow it
  std::set<Connection*>& live;
  std::optional<TokenSet::Digest> token;      // the token it logged in with, once it has
  kj::Own<kj::PromiseFulfiller<void>> close;  // fulfilled: drop the connection
  kj::Own<kj::AsyncIoStream> stream;          // BufferedStream over CountingStream over the socket
  kj::Own<ConnectionGuard> guard;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
};

kj::Promise<void> Server::serve(kj::Own<kj::AsyncIoStream> raw, bool local) {
  std::string peer = local ? "unix:" + options_.unix_socket : net::peer_name(*raw);
  // Until it logs in, the connection is one of a bounded number and has until the login
  // deadline; either closes it by cancelling what serves it.
  auto slot = pre_login_.admit(peer);
  auto closing = slot->closing();
  return handshake(kj::mv(raw), peer, local, *slot)
      .exclusiveJoin(kj::mv(closing))
      .attach(kj::mv(slot))
      .then([peer]() { spdlog::debug("connection from {} ended", peer); });
}

kj::Promise<void> Server::handshake(kj::Own<kj::AsyncIoStream> raw, std::string peer, bool local,
                                    PreLoginSlot& slot) {
  return net::accept_connection(kj::mv(raw), peer,
                                {.tls = tls_.server.get(), .unix_socket = local, .lanes = lanes_ != nullptr})
      .then([this, peer, &slot](kj::Maybe<net::Accepted> accepted) mutable -> kj::Promise<void> {
        KJ_IF_MAYBE (a, accepted) {
          if (a->lane_fd >= 0) {
            // Its own thread reads its hello within the login deadline (lanes.h).
            lanes_->adopt(a->lane_fd, kj::mv(peer), a->tls_expected);
            return kj::READY_NOW;
          }
          return serve_rpc(kj::mv(a->stream), kj::mv(peer), a->tls, a->tls_expected, slot);
        }
        return kj::READY_NOW;
      });
}

kj::Promise<void> Server::serve_rpc(kj::Own<kj::AsyncIoStream> raw, std::string peer, bool tls,
                                    bool tls_expected, PreLoginSlot& slot) {
  auto conn = kj::heap<Connection>(rpc_, connections_);
  // The counting goes beneath the buffer, so it runs once per socket read rather than once for
  // each piece of a frame the RPC stream asks the buffer for.
  auto counting = kj::heap<CountingStream>(kj::mv(raw), bytes_.client, &writes_in_flight_);
  CountingStream* stream = counting.get();
  conn->stream = kj::heap<BufferedStream>(kj::mv(counting));
  conn->guard = kj::heap<ConnectionGuard>(*conn->stream, peer, tls);
  conn->network = kj::heap<capnp::TwoPartyVatNetwork>(*conn->guard, capnp::rpc::twoparty::Side::SERVER,
                                                      ConnectionGuard::reader_options());
  auto closed = kj::newPromiseAndFulfiller<void>();
  conn->close = kj::mv(closed.fulfiller);
  Connection* c = conn.get();
  conn->ctx.close_connection = [c](const std::string& why) {
    c->guard->note_closing(why);
    if (c->close->isWaiting()) c->close->fulfill();
  };
  auto gate = tls_expected ? make_refusing_gate(
                                 "this server serves TLS only: connect with TLS (ClientOptions::tls_ca, "
                                 "or --tls-ca FILE for agentctl and agentd-bench)")
                           : make_gate(gate_, peer, net::address_part(peer),
                                       [this, c, stream, &slot](const TokenSet::Digest& token) {
                                         // Logged in: the normal limits from now on, and no login deadline.
                                         slot.logged_in();
                                         c->token = token;
                                         c->guard->set_logged_in();
                                         // The connection's own context: its close_connection closes this
                                         // one.
                                         return make_agent_server(
                                             c->ctx, [this, stream]() { stream->retarget(bytes_.peer); });
                                       });
  conn->rpc = kj::heap(capnp::makeRpcServer(*conn->network, kj::mv(gate)));
  // Requests a client has sent and the server not yet answered: past 8 MiB of them, the server
  // stops reading from it until some are answered.
  conn->rpc->setFlowLimit(8 * 1024 * 1024);
  auto done = conn->network->onDisconnect().exclusiveJoin(kj::mv(closed.promise));
  return done.attach(kj::mv(conn));
}

std::size_t Server::reload_tokens() {
  if (options_.auth_token_file.empty()) return 0;
  // Throws (keeping the tokens there are) when the file cannot be read, is too open or is empty.
  creds_.tokens = TokenSet(read_auth_tokens(options_.auth_token_file));
  gate_.tokens = creds_.tokens;
  // Closing only fulfills each connection's close promise: none is destroyed in this loop.
  std::size_t closed = 0;
  for (Connection* c : connections_) {
    if (!c->token || gate_.tokens.contains(*c->token)) continue;
    c->ctx.close_connection(
        fmt::format("the token it logged in with is no longer in "
                    "--auth-token-file {} (reloaded)",
                    options_.auth_token_file));
    ++closed;
  }
  if (lanes_)
    closed += lanes_->close_unless([this](const TokenSet::Digest& d) { return gate_.tokens.contains(d); });
  return closed;
}

}  // namespace agentd::detail
