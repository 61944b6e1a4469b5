// net/accept: the name a connection's peer is logged and throttled under.
#include "accept.h"

#include <catch2/catch.hpp>
#include <kj/async-io.h>
#include <sys/socket.h>

#include <string>

using namespace agentd;

TEST_CASE("peer_name names a TCP peer by address and port, a Unix socket as unix", "[net][accept]") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto pipe = kj::newTwoWayPipe();
  CHECK(net::peer_name(*pipe.ends[0]) == "unknown");

  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  auto a = io.lowLevelProvider->wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  auto b = io.lowLevelProvider->wrapSocketFd(fds[1], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  CHECK(net::peer_name(*a) == "unix");

  auto listen_addr = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope);
  auto listener = listen_addr->listen();
  const auto port = listener->getPort();
  auto accepted = listener->accept();
  auto connected = io.provider->getNetwork()
                       .parseAddress("127.0.0.1", port)
                       .then([](kj::Own<kj::NetworkAddress> addr) { return addr->connect(); })
                       .wait(io.waitScope);
  auto server_side = accepted.wait(io.waitScope);
  CHECK(net::peer_name(*connected) == "127.0.0.1:" + std::to_string(port));
  CHECK_THAT(net::peer_name(*server_side), Catch::StartsWith("127.0.0.1:"));
}
