// dial and the accept side over a real loopback socket, in one process: a dial that succeeds
// (plaintext and TLS), and one failing at each stage, the stage named.
#include "dial.h"

#include "accept.h"
#include "connection_guard.h"
#include "endpoint.h"
#include "login_gate.h"
#include "task_errors.h"
#include "test_pki.h"
#include "tls.h"

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

using agentd::net::dial;
using agentd::net::DialStage;
using agentd::net::Endpoint;
using namespace std::chrono_literals;
namespace detail = agentd::detail;
namespace net = agentd::net;
namespace wire = agentd::wire;

namespace {

// Answers info (or fails it); nothing else.
class StubServer final : public wire::AgentServer::Server {
 public:
  explicit StubServer(bool info_fails) : info_fails_(info_fails) {}
  kj::Promise<void> info(InfoContext context) override {
    if (info_fails_) return KJ_EXCEPTION(FAILED, "this stub has no info");
    context.getResults().initInfo().setServerId("stub-1");
    return kj::READY_NOW;
  }

 private:
  bool info_fails_;
};

// A loopback listener that serves as as_server's accept path does (accept_connection, the
// connection guard, the Gate), or misbehaves as told.
class TestServer {
 public:
  enum class Mode { serve, close_at_once, silent };
  TestServer(kj::AsyncIoContext& io, Mode mode, detail::TlsConfig* tls = nullptr,
             std::vector<std::string> tokens = {}, bool info_fails = false)
      : mode_(mode), tls_(tls), info_fails_(info_fails), tasks_(errors_) {
    gate_.tokens = detail::TokenSet(tokens);
    listener_ = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope)->listen();
    tasks_.add(accept_loop());
  }
  Endpoint endpoint() { return Endpoint::from("127.0.0.1", listener_->getPort()); }

 private:
  struct Conn {
    kj::Own<kj::AsyncIoStream> stream;
    kj::Own<detail::ConnectionGuard> guard;
    kj::Own<capnp::TwoPartyVatNetwork> network;
    kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  };

  kj::Promise<void> accept_loop() {
    return listener_->accept().then([this](kj::Own<kj::AsyncIoStream> raw) {
      if (mode_ == Mode::silent) held_.push_back(kj::mv(raw));
      if (mode_ == Mode::serve) tasks_.add(serve(kj::mv(raw)));
      return accept_loop();
    });
  }

  kj::Promise<void> serve(kj::Own<kj::AsyncIoStream> raw) {
    std::string peer = net::peer_name(*raw);
    return net::accept_connection(kj::mv(raw), peer, {.tls = tls_})
        .then([this, peer](kj::Maybe<net::Accepted> accepted) {
          KJ_IF_MAYBE (a, accepted) {
            auto c = kj::heap<Conn>();
            c->stream = kj::mv(a->stream);
            c->guard = kj::heap<detail::ConnectionGuard>(*c->stream, peer, a->tls);
            c->network = kj::heap<capnp::TwoPartyVatNetwork>(*c->guard, capnp::rpc::twoparty::Side::SERVER,
                                                             detail::ConnectionGuard::reader_options());
            bool fails = info_fails_;
            c->rpc = kj::heap(
                capnp::makeRpcServer(*c->network, detail::make_gate(gate_, peer, net::address_part(peer),
                                                                    [fails](const detail::TokenSet::Digest&) {
                                                                      return wire::AgentServer::Client(
                                                                          kj::heap<StubServer>(fails));
                                                                    })));
            conns_.push_back(kj::mv(c));
          }
        });
  }

  Mode mode_;
  detail::TlsConfig* tls_;
  bool info_fails_;
  detail::GateContext gate_;
  kj::Own<kj::ConnectionReceiver> listener_;
  std::vector<kj::Own<kj::AsyncIoStream>> held_;
  std::vector<kj::Own<Conn>> conns_;
  detail::TaskErrors errors_{"test server task"};
  kj::TaskSet tasks_;
};

kj::Own<net::Dialed> dial_now(kj::AsyncIoContext& io, const Endpoint& to, net::DialOptions o) {
  return dial(io, to, std::move(o)).wait(io.waitScope);
}

}  // namespace

TEST_CASE("dial connects, logs in and learns who the server is", "[net][dial]") {
  auto io = kj::setupAsyncIo();
  TestServer server(io, TestServer::Mode::serve);
  detail::ByteCount bytes;
  auto d = dial_now(io, server.endpoint(), {.bytes = &bytes, .stage_limit = 10s});
  REQUIRE(d->ok());
  CHECK(d->stage == DialStage::info);
  CHECK(d->server_id == "stub-1");
  CHECK(d->stream.get() != nullptr);
  CHECK(bytes.in > 0);
  CHECK(bytes.out > 0);
}

TEST_CASE("dial over TLS, and the handshake stage when the other end speaks none", "[net][dial]") {
  agentd::test::TestPki pki;
  auto io = kj::setupAsyncIo();
  auto server_tls = detail::TlsConfig::server({.cert = pki.server_cert, .key = pki.server_key});
  auto client_tls = detail::TlsConfig::client({.ca = pki.ca, .ca_name = "tls_ca"});
  {
    TestServer server(io, TestServer::Mode::serve, server_tls.get());
    auto d = dial_now(io, server.endpoint(), {.tls = client_tls.get(), .stage_limit = 10s});
    REQUIRE(d->ok());
    CHECK(d->server_id == "stub-1");
  }
  {
    // A plaintext server closes a TLS client at once: the handshake fails.
    TestServer plain(io, TestServer::Mode::serve);
    auto d = dial_now(io, plain.endpoint(), {.tls = client_tls.get(), .stage_limit = 10s});
    CHECK_FALSE(d->ok());
    CHECK(d->stage == DialStage::tls);
    CHECK(d->failed);
    CHECK(d->stream.get() == nullptr);
    CHECK(std::string(net::stage_name(d->stage)) == "TLS");
  }
}

TEST_CASE("dial names the stage that failed", "[net][dial]") {
  auto io = kj::setupAsyncIo();
  SECTION("resolve") {
    auto d = dial_now(io, Endpoint::parse("no-such-host.invalid:1"), {.stage_limit = 10s});
    CHECK_FALSE(d->ok());
    CHECK(d->stage == DialStage::resolve);
  }
  SECTION("connect") {
    Endpoint closed;
    {
      TestServer gone(io, TestServer::Mode::close_at_once);
      closed = gone.endpoint();
    }
    auto d = dial_now(io, closed, {.stage_limit = 10s});
    CHECK_FALSE(d->ok());
    CHECK(d->stage == DialStage::connect);
    CHECK(d->failed);
  }
  SECTION("login: refused at the gate") {
    TestServer server(io, TestServer::Mode::serve, nullptr, {"the-right-token-0123456789abcdef"});
    auto d = dial_now(io, server.endpoint(), {.token = "wrong", .stage_limit = 10s});
    CHECK_FALSE(d->ok());
    CHECK(d->stage == DialStage::login);
    REQUIRE(d->refused);
    CHECK(d->refused->code() == agentd::ErrorCode::unauthenticated);
    CHECK(d->stream.get() == nullptr);
  }
  SECTION("login: no answer within the stage limit") {
    TestServer server(io, TestServer::Mode::silent);
    auto d = dial_now(io, server.endpoint(), {.stage_limit = 200ms});
    CHECK_FALSE(d->ok());
    CHECK(d->stage == DialStage::login);
    REQUIRE(d->failed);
    CHECK(d->failed->getType() == kj::Exception::Type::OVERLOADED);
  }
  SECTION("login: the whole dial's limit") {
    TestServer server(io, TestServer::Mode::silent);
    auto d = dial_now(io, server.endpoint(), {.total_limit = 200ms});
    CHECK(d->stage == DialStage::login);
    REQUIRE(d->failed);
    CHECK(d->failed->getType() == kj::Exception::Type::OVERLOADED);
  }
  SECTION("login: the connection closed") {
    TestServer server(io, TestServer::Mode::close_at_once);
    auto d = dial_now(io, server.endpoint(), {.stage_limit = 10s});
    CHECK(d->stage == DialStage::login);
    CHECK(d->failed);
  }
  SECTION("info") {
    TestServer server(io, TestServer::Mode::serve, nullptr, {}, /*info_fails=*/true);
    auto d = dial_now(io, server.endpoint(), {.stage_limit = 10s});
    CHECK_FALSE(d->ok());
    CHECK(d->stage == DialStage::info);
    REQUIRE(d->failed);
    CHECK_THAT(d->failed->getDescription().cStr(), Catch::Matchers::Contains("no info"));
  }
}
