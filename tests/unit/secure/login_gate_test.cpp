// The Gate (secure/login_gate.h) over kj::newTwoWayPipe: a real Cap'n Proto connection, as a
// client sees it, to a gate whose AgentServer is a stub that answers ping. Asserts what a client
// relies on: the right token gets the server (one per connection), a wrong or missing one is
// refused with a message saying what to do, and failed logins are throttled per address and per
// server without locking out addresses that never failed.
#include "login_gate.h"
#include "endpoint.h"

#include "value_codec.h"
#include "test_names.h"

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace agentd::test;
using agentd::detail::GateContext;
using agentd::detail::LoginThrottle;
using agentd::detail::TokenSet;
namespace detail = agentd::detail;
namespace wire = agentd::wire;

namespace {

// The AgentServer a good login gets: answers ping, counting them.
class StubServer final : public wire::AgentServer::Server {
 public:
  explicit StubServer(int& pings) : pings_(pings) {}
  kj::Promise<void> ping(PingContext) override {
    ++pings_;
    return kj::READY_NOW;
  }

 private:
  int& pings_;  // outlives this
};

// What one login answered.
struct Answer {
  std::optional<Error> error;
  bool has_server = false;
  wire::AgentServer::Client server = nullptr;
};

// The error's message, or "" when the login was accepted.
std::string message(const Answer& a) { return a.error ? a.error->message() : std::string(); }

// One client connection to a gate, over an in-memory pipe; the gate says the peer is peer.
struct Connection {
  Connection(kj::AsyncIoContext& io_in, GateContext& ctx, std::string peer, int& pings,
             std::vector<TokenSet::Digest>& made)
      : io(io_in) {
    auto pipe = kj::newTwoWayPipe();
    server_end = kj::mv(pipe.ends[0]);
    client_end = kj::mv(pipe.ends[1]);
    // The address failures are counted under, as the server gives it (net::address_part).
    std::string address = agentd::net::address_part(peer);
    auto gate = detail::make_gate(ctx, std::move(peer), std::move(address),
                                  [&pings, &made](const TokenSet::Digest& d) {
                                    made.push_back(d);
                                    return wire::AgentServer::Client(kj::heap<StubServer>(pings));
                                  });
    server_rpc =
        kj::heap<capnp::TwoPartyClient>(*server_end, kj::mv(gate), capnp::rpc::twoparty::Side::SERVER);
    client_rpc = kj::heap<capnp::TwoPartyClient>(*client_end);
  }

  Answer login(const std::string& token) {
    auto req = client_rpc->bootstrap().castAs<wire::Gate>().loginRequest();
    req.setToken(token);
    auto r = req.send().wait(io.waitScope);
    Answer a;
    if (r.hasError()) a.error = detail::read_error(r.getError());
    a.has_server = r.hasServer();
    if (a.has_server) a.server = r.getServer();
    return a;
  }

  kj::AsyncIoContext& io;
  kj::Own<kj::AsyncIoStream> server_end;
  kj::Own<kj::AsyncIoStream> client_end;
  kj::Own<capnp::TwoPartyClient> server_rpc;
  kj::Own<capnp::TwoPartyClient> client_rpc;
};

struct Gates {
  explicit Gates(std::vector<std::string> tokens, LoginThrottle::Limits limits = {})
      : ctx{TokenSet(tokens), LoginThrottle(limits)} {}
  Connection connect(const std::string& peer) { return Connection(io, ctx, peer, pings, made); }

  kj::AsyncIoContext io = kj::setupAsyncIo();
  GateContext ctx;
  int pings = 0;
  std::vector<TokenSet::Digest> made;  // the digest each AgentServer was made for
};

// Limits whose buckets never refill within a test.
LoginThrottle::Limits slow_refill(double per_address, double overall) {
  LoginThrottle::Limits l;
  l.per_address_burst = per_address;
  l.per_address_refill = std::chrono::hours(1);
  l.overall_burst = overall;
  l.overall_refill = std::chrono::hours(1);
  return l;
}

}  // namespace

TEST_CASE(
    "the right token gets the server, one per connection, and a wrong or missing one gets an "
    "error saying what to do",
    "[secure][login_gate]") {
  Gates g({"right-token", "second-token"});
  auto c = g.connect("10.0.0.1:5000");

  Answer wrong = c.login("wrong-token");
  REQUIRE(wrong.error);
  CHECK(wrong.error->code() == ErrorCode::unauthenticated);
  CHECK_THAT(wrong.error->message(), Contains("wrong token") && Contains("--auth-token-file"));
  CHECK_THAT(wrong.error->message(), !Contains("wrong-token"));  // the token is not echoed
  CHECK_FALSE(wrong.has_server);

  Answer none = c.login("");
  REQUIRE(none.error);
  CHECK(none.error->code() == ErrorCode::unauthenticated);
  CHECK_THAT(none.error->message(), Contains("requires a token") && Contains("AGENTD_TOKEN"));
  CHECK(g.made.empty());

  Answer right = c.login("right-token");
  CHECK_FALSE(right.error);
  REQUIRE(right.has_server);
  right.server.pingRequest().send().wait(g.io.waitScope);
  CHECK(g.pings == 1);
  REQUIRE(g.made.size() == 1);
  CHECK(g.made[0] == *g.ctx.tokens.match("right-token"));  // told which token logged in

  // A second login on the connection gets the same server, not another.
  Answer again = c.login("second-token");
  CHECK_FALSE(again.error);
  REQUIRE(again.has_server);
  again.server.pingRequest().send().wait(g.io.waitScope);
  CHECK(g.pings == 2);
  CHECK(g.made.size() == 1);

  // Another connection gets a server of its own.
  auto other = g.connect("10.0.0.2:5000");
  CHECK_FALSE(other.login("right-token").error);
  CHECK(g.made.size() == 2);
}

TEST_CASE("with authentication off every token is accepted", "[secure][login_gate]") {
  Gates g({});
  auto c = g.connect("10.0.0.1:5000");
  CHECK_FALSE(c.login("").error);
  CHECK(c.login("anything").has_server);
  CHECK(g.made.size() == 1);
}

TEST_CASE("failed logins are throttled per address: refused unchecked, other addresses go on",
          "[secure][login_gate]") {
  Gates g({"right-token"}, slow_refill(3, 100));
  auto c = g.connect("10.0.0.1:5000");
  CHECK_THAT(message(c.login("guess-1")), Contains("wrong token") && !Contains("refused unchecked"));
  CHECK_THAT(message(c.login("guess-2")), Contains("wrong token") && !Contains("refused unchecked"));
  // The failure that empties the address's bucket is still checked and answered as wrong.
  CHECK_THAT(message(c.login("guess-3")), Contains("wrong token"));

  // Now even the right token is refused, unchecked, with when to try again.
  Answer refused = c.login("right-token");
  REQUIRE(refused.error);
  CHECK(refused.error->code() == ErrorCode::unauthenticated);
  CHECK_THAT(refused.error->message(),
             Contains("too many failed logins from 10.0.0.1") && Contains("try again in"));
  CHECK_FALSE(refused.has_server);
  CHECK(g.made.empty());
  // Also on a new connection from the same address (another port): the throttle keys by address.
  auto same_host = g.connect("10.0.0.1:6000");
  CHECK_THAT(message(same_host.login("right-token")), Contains("too many failed logins"));

  // Another address is not slowed.
  auto other = g.connect("10.0.0.2:5000");
  Answer ok = other.login("right-token");
  CHECK_FALSE(ok.error);
  CHECK(ok.has_server);

  // IPv6 peers are counted by their address too.
  auto v6 = g.connect("[::1]:5000");
  for (int i = 0; i < 3; ++i) v6.login("guess");
  CHECK_THAT(message(v6.login("right-token")), Contains("from [::1];"));
}

TEST_CASE(
    "while the server's failure budget is spent, addresses that failed are refused and "
    "addresses that never failed are still checked",
    "[secure][login_gate]") {
  Gates g({"right-token"}, slow_refill(10, 2));
  auto a = g.connect("10.0.0.1:5000");
  auto b = g.connect("10.0.0.2:5000");
  a.login("guess");
  b.login("guess");  // the server's bucket is empty now

  Answer refused = a.login("right-token");
  REQUIRE(refused.error);
  CHECK_THAT(refused.error->message(),
             Contains("too many failed logins on this server") && Contains("10.0.0.1"));
  CHECK(g.made.empty());

  auto fresh = g.connect("10.0.0.3:5000");
  Answer ok = fresh.login("right-token");
  CHECK_FALSE(ok.error);
  CHECK(ok.has_server);
}

TEST_CASE("a refusing gate tells every login why", "[secure][login_gate]") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto pipe = kj::newTwoWayPipe();
  capnp::TwoPartyClient server(*pipe.ends[0], detail::make_refusing_gate("this server speaks TLS only"),
                               capnp::rpc::twoparty::Side::SERVER);
  capnp::TwoPartyClient client(*pipe.ends[1]);
  auto req = client.bootstrap().castAs<wire::Gate>().loginRequest();
  req.setToken("any");
  auto r = req.send().wait(io.waitScope);
  REQUIRE(r.hasError());
  Error e = detail::read_error(r.getError());
  CHECK(e.code() == ErrorCode::unauthenticated);
  CHECK(e.message() == "this server speaks TLS only");
  CHECK_FALSE(r.hasServer());
}
