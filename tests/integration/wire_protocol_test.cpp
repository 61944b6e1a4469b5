// The per-capability protocol (AgentServer -> Agent -> Result in schemas/agentd.capnp), the open
// protocol for clients in other languages, driven with nothing but Cap'n Proto's generated code
// against a real as_server: promise pipelining works on it.
#include "raw_login.h"
#include "server_process.h"

#include "agentd.capnp.h"

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

using namespace agentd::test;
namespace wire = agentd::wire;

namespace {

struct RawConnection {
  explicit RawConnection(const ServerProcess& s)
      : stream(io.provider->getNetwork()
                   .parseAddress("127.0.0.1", s.port())
                   .wait(io.waitScope)
                   ->connect()
                   .wait(io.waitScope)),
        rpc(*stream),
        server(raw_login(rpc)) {}
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyClient rpc;
  wire::AgentServer::Client server;
};

}  // namespace

TEST_CASE("create, reply on the pipelined agent and get on the pipelined result in one go",
          "[wire][pipelining]") {
  auto s = ServerProcess::start(standard_args());
  RawConnection c(*s);

  // Three requests, each addressed to a capability the one before has not returned yet; all are
  // sent before anything answers, and the server runs them in order: one round trip.
  auto create = c.server.createAgentRequest();
  create.setClassName("EchoAgent");  // args left unset: the same as {}
  auto created = create.send();
  auto reply = created.getAgent().replyRequest();
  auto msg = reply.initInput().initMsg();
  msg.setName("user");
  msg.initContent().setText("pipelined");
  reply.setCallId("raw-pipelined-1");
  auto replied = reply.send();
  auto got = replied.getResult().getRequest().send();

  auto outcome = got.wait(c.io.waitScope).getOutcome();
  REQUIRE(outcome.isMsg());
  CHECK(outcome.getMsg().getContent().getText() == "pipelined");
  auto made = created.wait(c.io.waitScope);
  CHECK_FALSE(made.hasError());
  CHECK(made.getId().size() == 32);
}

TEST_CASE("a raw createAgent with args unset gets what {} gives", "[wire]") {
  auto s = ServerProcess::start(standard_args());
  RawConnection c(*s);
  // EchoAgent reads args().value("prefix", ...): with null args that threw a JSON type error.
  for (bool set_empty : {false, true}) {
    auto create = c.server.createAgentRequest();
    create.setClassName("EchoAgent");
    if (set_empty) create.initArgs().initObject(0);
    auto made = create.send().wait(c.io.waitScope);
    INFO("args " << (set_empty ? "{}" : "unset"));
    CHECK_FALSE(made.hasError());
    auto info = made.getAgent().infoRequest().send().wait(c.io.waitScope);
    CHECK(info.getAgent().getClassName() == "EchoAgent");
  }
}
