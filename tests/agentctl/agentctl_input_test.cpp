// agentctl and input it cannot send: JSON arguments nested deeper than a value may be (refused
// with the limit named, never a crash), and text that is not UTF-8, which the server refuses at
// its edge so that `agentctl --json list` keeps working for everyone.
#include "agentctl_runner.h"
#include "raw_login.h"
#include "server_process.h"

#include "agentd.capnp.h"

#include <agentd/client.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <string>

using namespace agentd::test;
using agentd::Value;
using Catch::Matchers::Contains;

namespace {

std::string nested_json(int depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

}  // namespace

TEST_CASE("agentctl refuses JSON arguments nested deeper than 64 levels, naming the limit",
          "[agentctl][input]") {
  auto server = ServerProcess::start(standard_args());
  auto agent = server->connect().create_agent("EchoAgent", "e");
  const std::string port = std::to_string(server->port());
  for (int depth : {65, 20000}) {
    INFO(depth);
    auto method = run_agentctl({"--port", port, "method", agent.id(), "add", nested_json(depth)});
    CHECK(method.term_signal == 0);
    CHECK(method.exit_code == 2);
    CHECK_THAT(method.err, Contains("JSON cannot be sent: JSON nested deeper than 64 levels"));
    auto call = run_agentctl({"--port", port, "call", "--content-json", agent.id(), nested_json(depth)});
    CHECK(call.term_signal == 0);
    CHECK(call.exit_code == 2);
    CHECK_THAT(call.err, Contains("MESSAGE cannot be sent: JSON nested deeper than 64 levels"));
  }
  // 64 levels are fine.
  auto ok = run_agentctl({"--json", "--port", port, "call", "--content-json", agent.id(), nested_json(64)});
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("text that is not UTF-8 is refused at the server, and agentctl --json list still works",
          "[agentctl][input]") {
  auto server = ServerProcess::start(standard_args());
  server->connect().create_agent("EchoAgent", "fine");
  {
    // A client that sends the bytes anyway (the C++ client would refuse them itself).
    auto io = kj::setupAsyncIo();
    auto stream = io.provider->getNetwork()
                      .parseAddress("127.0.0.1", server->port())
                      .wait(io.waitScope)
                      ->connect()
                      .wait(io.waitScope);
    capnp::TwoPartyClient rpc(*stream);
    auto agents = raw_login(rpc);
    auto create = agents.createAgentRequest();
    create.setClassName("EchoAgent");
    create.setName("bad \xff name");
    auto answer = create.send().wait(io.waitScope);
    REQUIRE(answer.hasError());
    CHECK(answer.getError().getCode() == agentd::wire::ErrorCode::BAD_REQUEST);
    CHECK_THAT(std::string(answer.getError().getMessage().cStr()),
               Contains("the agent's name is not UTF-8") && Contains("byte 4 is 0xff"));
  }
  // agentctl itself refuses such a name before sending it.
  const std::string port = std::to_string(server->port());
  auto made = run_agentctl({"--port", port, "create", "EchoAgent", "bad \xff name"});
  CHECK(made.exit_code != 0);
  CHECK_THAT(made.err, Contains("not UTF-8"));

  auto list = run_agentctl({"--json", "--port", port, "list"});
  INFO(list.err);
  REQUIRE(list.exit_code == 0);
  auto rows = Value::parse(list.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["name"] == "fine");
}
